"""free_port picks below the ephemeral range, where outgoing connections never take a port."""
import socket

from swiftlike.utils.net import LOWEST_PICKED, ephemeral_start, free_port


def test_free_ports_are_below_the_ephemeral_range_and_bindable():
    ports = {free_port() for _ in range(20)}
    assert all(LOWEST_PICKED <= p < ephemeral_start() for p in ports) and len(ports) > 1
    port = free_port()
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))


def test_a_taken_port_is_not_handed_out(monkeypatch):
    import swiftlike.utils.net as net
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", LOWEST_PICKED))
        picks = iter([LOWEST_PICKED, LOWEST_PICKED + 1])
        monkeypatch.setattr(net._PORT_PICKER, "randint", lambda a, b: next(picks))
        assert net.free_port() == LOWEST_PICKED + 1


def test_seeding_the_global_generator_does_not_repeat_the_ports():
    """Two test workers that each ran a seeded training run in-process picked the same ports, and one worker's test
    reached the other's server."""
    import random
    random.seed(42)
    first = [free_port() for _ in range(5)]
    random.seed(42)
    assert [free_port() for _ in range(5)] != first
