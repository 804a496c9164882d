"""Resource abuse against a broker subprocess, with a probe client measuring latency."""
