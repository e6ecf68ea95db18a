"""What every trainwire distribution shares: the wire protocol, errors, the store, TLS and server plumbing.

It imports no trainwire service and no framework library.
"""
