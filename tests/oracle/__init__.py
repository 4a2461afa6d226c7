"""The request validation as it was on pydantic (issue 38), kept as the oracle the msgspec validation is tested
against (tests/unit/protocols/test_validation_oracle.py: the same random bodies accepted or refused alike,
naming the same field) and the baseline of `make bench`'s validation figures (bench/validation.py).

A frozen copy, changed only where the test found the old code wrong (a union's tag taken for a field in a
refusal's name, see requests.py): the src modules are the product. When a change means to judge a body
differently from this, it deletes this folder with its test and bench's pydantic column, and pydantic leaves
the dev dependencies: the migration it checked is then over. Tests and the bench only: nothing under src
imports it."""
