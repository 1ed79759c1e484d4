"""vpol's own admission webhook: the policies it enforces, its server, its configuration."""
