from twisted.application.service import ServiceMaker

broker = ServiceMaker("Sluice broker", "broker_core.tap", "A Kafka-compatible broker", "broker")
