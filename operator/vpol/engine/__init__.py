"""The pure policy engine of every kind: matching, exceptions, evaluation, mutation, generation, deletion, image
verification, pod-controller autogen and the evaluation sandbox."""
