"""The fault-injection suite: real worker processes, real faults (``make test-faults``)."""
