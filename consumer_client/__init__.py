"""The client library apps import: blocking connection, admin client and the sluice CLI
(the consumer, the producer and the Spark source come later)."""
