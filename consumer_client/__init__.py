"""The client library apps import: admin client and the sluice CLI (consumer, producer, Spark source come later)."""
