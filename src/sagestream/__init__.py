"""sagestream: stream a SageMaker LLM endpoint to browsers from AWS Lambda, in OpenAI's streaming format."""

__version__ = "0.1.0"
