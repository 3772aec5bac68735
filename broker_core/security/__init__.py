"""Who is on the other end of a connection, and what they may do.

- :mod:`.principal`: :class:`~.principal.Principal` and :class:`~.principal.ConnectionSecurity`,
  the one object every layer reads to learn a connection's listener, security protocol and
  authenticated identity.

The package is sans-IO: nothing here touches a socket or a reactor.
"""
