"""The request validation as it was on pydantic (issue 38), kept as the oracle the msgspec validation is tested
against (tests/unit/protocols/test_validation_oracle.py): the same random bodies must be accepted or refused
alike, naming the same field. Tests only: nothing under src imports it."""
