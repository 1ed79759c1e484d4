"""The pure policy engine: matching, exceptions, evaluation and pod-controller autogen."""
