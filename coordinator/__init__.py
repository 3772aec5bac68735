"""The consumer coordinator (docs/design.md). Built in the consumer-groups issue."""
