"""`oncelog demo --security`: the order-enrichment pipeline on a broker reached only through
SASL_SSL with SCRAM-SHA-512 and ACLs; the generator, the Spark source and exactly-once
sink, and the verifier all connect through it (issue 14 item 5)."""

from __future__ import annotations

import io
import json
import re
import shutil

import pytest
from rich.console import Console

from .test_pipeline import assert_every_order_once, needs_spark

ORDERS = 300


@pytest.mark.slow
def test_secured_demo_delivers_every_order_once_through_sasl_ssl_only() -> None:
    from oncelog.pipeline.demo import run_pipeline_demo
    from oncelog.pipeline.security import DEMO_USER

    needs_spark()
    out = io.StringIO()
    result = None
    try:
        result = run_pipeline_demo(
            ORDERS,
            faults=False,  # the faults have their own tests; this one is about the settings
            security=True,
            keep_work_dir=True,
            console=Console(file=out, width=200, color_system=None),
            timeout_s=600,
        )
        output = out.getvalue()
        assert_every_order_once(result, output, ORDERS)
        assert "security: SASL_SSL only (no PLAINTEXT listener)" in output, output
        assert f"SCRAM-SHA-512 as User:{DEMO_USER}" in output, output

        assert result.work_dir is not None
        broker = result.work_dir / "broker"
        # the broker served one listener, SASL_SSL, from its start to its end
        listening = re.findall(r"listening on (\w+)://", (broker / "broker.log").read_text())
        assert listening == ["SASL_SSL"], listening
        ready = (broker / ".oncelog-ready").read_text().split()
        assert ready[0::2] == ["SASL_SSL"], ready  # LISTENER PORT lines (no metrics port)
        # the demo's user was not a super user: it went through the authorizer, and its ACLs
        # (literal topics, oncelog- transactional ids and groups) sufficed
        acls = json.loads((broker / "acls.json").read_text())
        assert f"User:{DEMO_USER}" in json.dumps(acls)
        assert "is Denied Operation" not in (broker / "broker.log").read_text()
        # its SCRAM credentials are salted: the run's password is nowhere in the data dir
        client_properties = (result.work_dir / "client.properties").read_text()
        password = re.search(r'password="([^"]+)"', client_properties)
        assert password is not None
        assert password.group(1) not in (broker / "scram-credentials.json").read_text()
        # and no password is in the broker's command line (its log's first line)
        assert "password=" not in (broker / "broker.log").read_text()
    except BaseException:
        print(out.getvalue())
        raise
    finally:
        if result is not None and result.work_dir is not None:
            shutil.rmtree(result.work_dir, ignore_errors=True)


@pytest.mark.parametrize(
    ("other", "why"),
    [
        (["--brokers", "3"], "runs on one broker only"),
        (["--bootstrap-servers", "127.0.0.1:1"], "another cluster's security is its own"),
    ],
    ids=["cluster", "other"],
)
def test_security_with_a_cluster_is_a_usage_error(other: list[str], why: str) -> None:
    """Refused before anything starts: a secured cluster for the demo is not built, and
    another cluster's security is its own."""
    from click.testing import CliRunner

    from oncelog.cli.main import main

    result = CliRunner().invoke(main, ["demo", "--security", *other])
    assert result.exit_code == 2, result.output
    assert "Invalid value for --security" in result.output, result.output
    assert why in " ".join(result.output.split()), result.output
