"""A Kafka source's brokers and topics, checked before Spark starts.

Spark's Kafka source finds an unreachable broker or a missing topic only once its query runs,
after minutes of retries and a Java trace. One metadata request, with a short timeout, made
by librdkafka (``confluent-kafka``) with the source's own connection options — Spark's
``kafka.*`` options of the Java client turned into librdkafka's, the SASL credentials of a
``PlainLoginModule``/``ScramLoginModule`` JAAS line into its ``sasl.username`` and
``sasl.password`` — says it in seconds. A source whose security options have no librdkafka
equivalent here (key and trust stores in JKS or PKCS12, OAuth, Kerberos) is not checked:
Spark's client then decides, as before. Secrets never appear in the errors.
"""

from __future__ import annotations

import difflib
import re
import time
from collections.abc import Mapping
from typing import Any

from cdcflow.errors import ConfigError

#: Seconds the brokers have to answer the metadata request.
TIMEOUT = 10.0

#: Java client options (``kafka.`` stripped) with the same name and meaning in librdkafka.
_SAME = ("security.protocol", "sasl.mechanism", "client.id")
#: JAAS login modules whose credentials librdkafka takes as ``sasl.username``/``password``.
_LOGIN_MODULES = ("PlainLoginModule", "ScramLoginModule")
_JAAS = re.compile(r'(\w+)\s*=\s*"((?:[^"\\]|\\.)*)"')
#: librdkafka errors after which no answer will come (its own names).
_FATAL = {
    "_ALL_BROKERS_DOWN": "no broker answered",
    "_RESOLVE": "the broker's host name does not resolve",
    "_AUTHENTICATION": "the brokers refused the credentials",
    "_SSL": "the TLS handshake failed",
}


class KafkaUnreachable(ConfigError):
    """A Kafka source's brokers did not answer a metadata request."""

    code = "KAFKA_UNREACHABLE"


class KafkaTopicMissing(ConfigError):
    """A Kafka source's topics (or pattern) name nothing on its brokers."""

    code = "KAFKA_TOPIC_MISSING"


def librdkafka_options(options: Mapping[str, str]) -> dict[str, str] | None:
    """The librdkafka configuration of Spark's Kafka options (``kafka.*``), or ``None`` when
    a security option has no equivalent here."""
    out = {"bootstrap.servers": options["kafka.bootstrap.servers"]}
    for key, value in options.items():
        name = key.removeprefix("kafka.")
        if name == key or name == "bootstrap.servers":
            continue
        if name in _SAME:
            out[name] = value
        elif name == "sasl.jaas.config":
            creds = _jaas_credentials(value)
            if creds is None:
                return None
            out["sasl.username"], out["sasl.password"] = creds
        elif name == "ssl.endpoint.identification.algorithm":
            out[name] = value or "none"
        elif (
            name == "ssl.truststore.location" and options.get("kafka.ssl.truststore.type") == "PEM"
        ):
            out["ssl.ca.location"] = value
        elif name == "ssl.truststore.certificates":
            out["ssl.ca.pem"] = value
        elif name == "ssl.truststore.type" and value == "PEM":
            continue
        elif name.startswith(("ssl.", "sasl.")):
            return None
    if "SSL" in out.get("security.protocol", "").upper():
        # the Java client trusts the JVM's certificate authorities; librdkafka the system's
        out.setdefault("ssl.ca.location", "probe")
    return out


def _jaas_credentials(line: str) -> tuple[str, str] | None:
    """``username`` and ``password`` of a PLAIN or SCRAM JAAS line, else ``None``."""
    if not any(m in line for m in _LOGIN_MODULES):
        return None
    fields = {k: re.sub(r"\\(.)", r"\1", v) for k, v in _JAAS.findall(line)}
    if "username" not in fields or "password" not in fields:
        return None
    return fields["username"], fields["password"]


def topics_at(
    name: str, options: Mapping[str, str], secrets: list[str], timeout: float = TIMEOUT
) -> set[str] | None:
    """The topics the brokers of Spark's Kafka ``options`` list (internal ones left out), by
    one metadata request; ``None`` when the security options have no librdkafka equivalent.
    Raises :class:`KafkaUnreachable` naming source ``name`` and its brokers, without the
    ``secrets``."""
    conf = librdkafka_options(options)
    if conf is None:
        return None
    hidden = secrets + [conf[k] for k in ("sasl.username", "sasl.password") if k in conf]
    return _topics(name, conf, timeout, hidden)


def listed(topics: set[str], asked: str, most: int = 20) -> str:
    """The brokers' topics for a hint, those closest to what was asked first (a broker of
    hundreds of topics lists the ones a typo meant, not the alphabet's first)."""
    if not topics:
        return "the brokers hold no topic"

    def near(topic: str) -> tuple[float, str]:
        return (-difflib.SequenceMatcher(None, asked, topic).ratio(), topic)

    shown = sorted(topics, key=near)[:most]
    return "topics there: " + ", ".join(shown) + (" …" if len(topics) > most else "")


def _topics(name: str, conf: dict[str, str], timeout: float, secrets: list[str]) -> set[str]:
    """The topics the brokers list (internal ones left out)."""
    from confluent_kafka import KafkaException
    from confluent_kafka.admin import AdminClient

    errors: list[Any] = []
    settings: dict[str, Any] = {**conf, "log_level": 0, "error_cb": errors.append}
    client = AdminClient(settings)
    deadline = time.monotonic() + timeout
    cause = "no answer"
    while True:
        try:
            found = client.list_topics(timeout=min(1.0, max(0.1, deadline - time.monotonic())))
            return {t for t in found.topics if not t.startswith("__")}
        except KafkaException as e:
            cause = e.args[0].str() if e.args else str(e)
        client.poll(0)  # serves error_cb
        fatal = [err for err in errors if err.name() in _FATAL]
        if fatal or time.monotonic() >= deadline:
            break
    what = _FATAL[fatal[0].name()] if fatal else f"no answer within {timeout:g}s"
    # the first error says why (a refused connection, a name that does not resolve)
    detail = errors[0].str() if errors else cause
    for secret in secrets:
        if secret:
            detail = detail.replace(secret, "***")
    raise KafkaUnreachable(
        f"source {name!r}: the Kafka brokers at bootstrap_servers {conf['bootstrap.servers']} "
        f"could not be reached: {what} ({detail})",
        hint="check the source's kafka.bootstrap_servers (host:port of the brokers' listener "
        "for clients), that the brokers run and this machine reaches them, and the security "
        "options and secrets",
    )
