"""The consumer coordinator (seed 001). Built in the consumer-groups issue."""
