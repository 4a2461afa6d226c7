"""Laptop-only stand-ins for the AWS pieces around sagestream: never deployed."""
