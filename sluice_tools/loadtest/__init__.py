"""The load driver (``sluice loadtest``): many consumers in several processes."""
