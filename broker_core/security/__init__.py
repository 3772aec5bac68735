"""Who is on the other end of a connection, and what they may do.

- :mod:`.principal`: :class:`~.principal.Principal` and :class:`~.principal.ConnectionSecurity`,
  the one object every layer reads to learn a connection's listener, security protocol and
  authenticated identity.
- :mod:`.scram_credential`: the stored form of a SCRAM password.
- :mod:`.scram` and :mod:`.sasl_plain`: the SCRAM (RFC 5802/7677) and PLAIN (RFC 4616) exchanges.
- :mod:`.sasl`: the per-connection :class:`~.sasl.SaslServer` state machine, the
  :data:`~.sasl.CredentialLookup` seam to the user store, and Sluice's :class:`~.sasl.SaslClient`.
- :mod:`.cluster_secret`: the secret brokers log in to each other with.

The package is sans-IO: nothing here touches a socket or a reactor.
"""
