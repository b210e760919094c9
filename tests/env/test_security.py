"""Loopback by default; anything wider needs a token; tokens are checked on every call; TLS works."""

from __future__ import annotations

import datetime
import ipaddress

import grpc
import numpy as np
import pytest

from rlhw.config.server import ServerConfig, is_loopback_host
from rlhw.env.client import EnvServerUnavailable, RemoteEnv, Unauthenticated
from rlhw.env.fake_env import FakeEnv
from rlhw.env.server import EnvServer, check_exposure
from rlhw.errors import ConfigError

GOOD = np.zeros(7, np.float32)


def test_the_default_bind_is_loopback():
    cfg = ServerConfig()
    assert cfg.host == "127.0.0.1" and cfg.loopback


@pytest.mark.parametrize(
    "host,loopback",
    [
        ("127.0.0.1", True),
        ("127.3.2.1", True),
        ("::1", True),
        ("localhost", True),
        ("0.0.0.0", False),
        ("::", False),
        ("10.1.2.3", False),
        ("no-such-host.invalid", False),
    ],
)
def test_loopback_detection(host, loopback):
    assert is_loopback_host(host) is loopback


@pytest.mark.parametrize("host", ["0.0.0.0", "10.1.2.3"])
def test_binding_beyond_loopback_without_a_token_is_refused_before_listening(host, monkeypatch):
    monkeypatch.delenv("RLHW_ENV_TOKEN", raising=False)
    with pytest.raises(ConfigError) as err:
        EnvServer(FakeEnv(), ServerConfig(host=host, port=0))
    assert err.value.path == "server.host"
    assert "needs a token" in str(err.value) and "RLHW_ENV_TOKEN" in str(err.value)


def test_a_token_from_the_environment_allows_a_wider_bind(monkeypatch):
    monkeypatch.setenv("MY_TOKEN", "s3cret")
    cfg = ServerConfig(host="0.0.0.0", token_env="MY_TOKEN")
    assert cfg.resolve_token() == "s3cret"
    check_exposure(cfg, cfg.resolve_token())  # no error


def test_tls_needs_both_cert_and_key():
    with pytest.raises(ValueError, match="TLS needs both tls_cert and tls_key; set server.tls_key"):
        ServerConfig(tls_cert="/tmp/cert.pem")


@pytest.mark.timeout(60)
def test_calls_without_or_with_a_wrong_token_are_unauthenticated(serve, clients):
    server = serve(FakeEnv(), token="right-token")
    with pytest.raises(Unauthenticated, match="missing 'authorization: Bearer <token>'"):
        RemoteEnv(server.address, reconnect_s=0.5)
    with pytest.raises(Unauthenticated, match="wrong token"):
        RemoteEnv(server.address, token="wrong-token", reconnect_s=0.5)
    # Streams are guarded too, not only unary calls.
    with grpc.insecure_channel(server.address) as channel:
        from rlhw.env.v1 import env_pb2 as pb
        from rlhw.env.v1 import env_pb2_grpc

        with pytest.raises(grpc.RpcError) as err:
            list(env_pb2_grpc.EnvStub(channel).Session(iter([pb.SessionRequest(reset=pb.ResetRequest())]), timeout=5))
        assert err.value.code() == grpc.StatusCode.UNAUTHENTICATED
    env = clients(RemoteEnv(server.address, token="right-token"))
    env.reset()
    env.step(GOOD)


def _self_signed(tmp_path):
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "localhost")])
    now = datetime.datetime.now(datetime.timezone.utc)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
        .sign(key, hashes.SHA256())
    )
    cert_path, key_path = tmp_path / "cert.pem", tmp_path / "key.pem"
    cert_path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    key_path.write_bytes(
        key.private_bytes(serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption())
    )
    return cert_path, key_path


@pytest.mark.timeout(60)
def test_tls_with_a_self_signed_certificate_and_a_token(serve, clients, tmp_path):
    cert, key = _self_signed(tmp_path)
    server = serve(FakeEnv(cameras=1), tls_cert=cert, tls_key=key, token="t0k")
    env = clients(RemoteEnv(server.address, token="t0k", tls_root_cert=cert))
    obs, _ = env.reset()
    assert obs["cam0"].shape == (128, 128, 3)
    env.step(GOOD)
    # A plaintext client cannot talk to the TLS port.
    with pytest.raises(EnvServerUnavailable):
        RemoteEnv(server.address, token="t0k", reconnect_s=0.3, timeout_s=1.0)
