"""P4Runtime over TLS: with a client CA only holders of a client certificate get in."""

from __future__ import annotations

import contextlib
from pathlib import Path

import finsy as fy
import grpc
import pytest
from finsy.proto import p4r, p4r_grpc

from control_plane.cli.main import main
from host.softswitch.launch import AsyncLoop
from host.softswitch.p4info import netco_p4info, write_p4info
from host.softswitch.server import TLSFiles
from host.softswitch.switch import SoftSwitch
from tests.support.netfile import one_switch_net
from tests.support.softswitch import job_entities, worker
from tests.support.tls import make_pki


@pytest.fixture(scope="module")
def pki(tmp_path_factory):
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture
def tls_switch(pki):
    sw = SoftSwitch()
    addr = sw.serve("127.0.0.1:0", TLSFiles(pki.server_cert, pki.server_key, pki.ca))
    yield sw, addr
    sw.stop()


def _finsy(addr: str, info: Path, creds) -> tuple[AsyncLoop, fy.Switch]:
    loop = AsyncLoop()
    opts = fy.SwitchOptions(p4info=info, p4blob=b"", device_id=1, initial_election_id=10,
                            channel_credentials=creds)
    return loop, fy.Switch("c", addr, opts)


def _capabilities(channel: grpc.Channel) -> str:
    stub = p4r_grpc.P4RuntimeStub(channel)
    return stub.Capabilities(p4r.CapabilitiesRequest(), timeout=5).p4runtime_api_version


def test_client_with_the_ca_and_a_client_cert_connects_and_writes(tls_switch, pki, tmp_path):
    sw, addr = tls_switch
    info = write_p4info(netco_p4info(), tmp_path / "netco.p4info.txtpb")
    creds = fy.GRPCCredentialsTLS(cacert=pki.ca, cert=pki.client_cert,
                                  private_key=pki.client_key)
    loop, c = _finsy(addr, info, creds)
    try:
        loop.run(c.__aenter__(), timeout=30)
        assert c.is_primary
        loop.run(c.insert(job_entities(3, [worker(0)])))
        assert sw.pipeline.cfg.job_map[3] == 0
    finally:
        with contextlib.suppress(Exception):
            loop.run(c.__aexit__(None, None, None), timeout=10)
        loop.close()


def _creds(ca, key=None, cert=None) -> grpc.ChannelCredentials:
    """TLS trusting ``ca``, with the client key and certificate when given (PEM files)."""
    return grpc.ssl_channel_credentials(root_certificates=ca.read_bytes(),
                                        private_key=key.read_bytes() if key else None,
                                        certificate_chain=cert.read_bytes() if cert else None)


def _assert_refused(addr: str, creds: grpc.ChannelCredentials | None) -> None:
    """A call over ``creds`` (None: plain text) does not get through: UNAVAILABLE."""
    ch = grpc.insecure_channel(addr) if creds is None else grpc.secure_channel(addr, creds)
    with ch, pytest.raises(grpc.RpcError) as e:
        _capabilities(ch)
    assert e.value.code() == grpc.StatusCode.UNAVAILABLE


def test_clients_without_the_ca_or_a_client_cert_cannot_connect(tls_switch, pki, tmp_path):
    _sw, addr = tls_switch
    # plain text against a TLS server
    _assert_refused(addr, None)
    # TLS trusting another CA: the server's certificate is not accepted
    other = make_pki(tmp_path / "other", ca_name="someone-else")
    _assert_refused(addr, _creds(other.ca, other.client_key, other.client_cert))
    # the right CA but no client certificate: mutual TLS refuses it
    _assert_refused(addr, _creds(pki.ca))
    # a client certificate from another CA is refused as well
    _assert_refused(addr, _creds(pki.ca, other.client_key, other.client_cert))
    # and the controller's own credentials get through
    with grpc.secure_channel(addr, _creds(pki.ca, pki.client_key, pki.client_cert)) as ch:
        assert _capabilities(ch) == "1.3.0"


def test_server_only_tls_accepts_any_client_that_trusts_it(pki):
    sw = SoftSwitch()
    try:
        addr = sw.serve("127.0.0.1:0", TLSFiles(pki.server_cert, pki.server_key))
        with grpc.secure_channel(addr, _creds(pki.ca)) as ch:
            assert _capabilities(ch) == "1.3.0"
    finally:
        sw.stop()


def test_bad_pem_files_are_one_line(tmp_path, capsys, pki):
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    base = ["switch", "--port", "1=udp:127.0.0.1:0", "--grpc", "127.0.0.1:0"]
    for tls in (["--tls-cert", str(junk), "--tls-key", str(pki.server_key)],
                ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.client_key)],
                ["--tls-cert", str(pki.server_cert), "--tls-key", str(pki.server_key),
                 "--tls-ca", str(junk)]):
        assert main([*base, *tls]) == 2
        err = capsys.readouterr().err
        assert "--tls-" in err and len(err.strip().splitlines()) == 1, err


def test_controller_applies_over_tls_only_with_its_certificate(tls_switch, pki, tmp_path, capsys):
    sw, addr = tls_switch
    net = tmp_path / "net.yaml"
    net.write_text(one_switch_net(addr))
    assert main(["controller", "apply", str(net), "--timeout", "5"]) == 3       # plain text
    assert "s1" in capsys.readouterr().err
    assert main(["controller", "apply", str(net), "--timeout", "5", "--tls-ca", str(pki.ca)]) == 3
    capsys.readouterr()
    tls = ["--tls-ca", str(pki.ca), "--tls-cert", str(pki.client_cert),
           "--tls-key", str(pki.client_key)]
    assert main(["controller", "apply", str(net), "--timeout", "10", *tls]) == 0, \
        capsys.readouterr().err
    assert sw.pipeline.cfg.job_map[4] == 0
    assert main(["controller", "status", str(net), "--timeout", "10", "--json", *tls]) == 0


def test_a_switch_tls_block_in_the_file_is_used(tls_switch, pki, tmp_path, capsys):
    """The per-switch ``tls`` block: the controller applies over mutual TLS with no flags."""
    sw, addr = tls_switch
    net = tmp_path / "net.yaml"
    net.write_text(one_switch_net(addr, tls={"ca": pki.ca, "cert": pki.client_cert,
                                             "key": pki.client_key}))
    assert main(["controller", "apply", str(net), "--timeout", "10"]) == 0, \
        capsys.readouterr().err
    assert sw.pipeline.cfg.job_map[4] == 0


def test_a_bad_tls_block_names_the_field(pki, tmp_path, capsys):
    net = tmp_path / "net.yaml"
    net.write_text(one_switch_net("127.0.0.1:1", tls={"ca": tmp_path / "nope.pem",
                                                       "cert": pki.client_cert,
                                                       "key": pki.client_key}))
    assert main(["controller", "apply", str(net), "--timeout", "1"]) == 2
    err = capsys.readouterr().err
    assert "switches[0].tls.ca" in err and "no such file" in err
    net.write_text(one_switch_net("127.0.0.1:1", tls={"ca": pki.ca, "cert": pki.client_cert,
                                                       "key": "null"}))
    assert main(["controller", "apply", str(net), "--timeout", "1"]) == 2
    assert "switches[0].tls.key: missing" in capsys.readouterr().err
