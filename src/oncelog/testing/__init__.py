"""Tools for testing applications against oncelog: an embedded broker, a broker in a
child process (for crash tests) and a pytest fixture."""

from oncelog.testing.embedded import EmbeddedBroker
from oncelog.testing.process import BrokerProcess, BrokerProcessError
from oncelog.testing.proxy import FaultInjectionProxy

__all__ = ["BrokerProcess", "BrokerProcessError", "EmbeddedBroker", "FaultInjectionProxy"]
