"""Sluice broker: everything a broker is (wire codec, log storage, replica manager,
controller, purgatory, ZooKeeper bridge, server)."""
