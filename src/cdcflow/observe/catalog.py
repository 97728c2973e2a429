"""The pipeline's catalog opened with pyiceberg, for reading without a JVM.

pyiceberg opens the catalogs it speaks: the embedded one (Iceberg's JDBC catalog on the SQLite
file inside the warehouse, opened read-only), Iceberg's JDBC catalog on PostgreSQL and a REST
catalog. A Hadoop catalog has no listing pyiceberg reads, and Hive, Glue and other JDBC
databases need libraries cdcflow does not install: those raise :class:`CatalogUnreadable`,
and the caller reads through Spark instead.

Opening never creates anything: an embedded catalog whose file does not exist is
``CATALOG_NOT_FOUND`` (a typo in ``warehouse`` must not read as an empty pipeline).
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import parse_qsl, quote, urlsplit

from cdcflow.errors import CdcflowError

if TYPE_CHECKING:
    from pyiceberg.catalog import Catalog as IcebergCatalog

    from cdcflow.config import CatalogConfig

#: The file of the embedded catalog, inside the warehouse (as the Spark session names it).
CATALOG_FILE = "catalog.db"


class CatalogUnreadable(Exception):
    """pyiceberg cannot open this catalog; ``reason`` says why, in a few words."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class CatalogNotFound(CdcflowError):
    """The configured catalog does not exist (nothing is created to read it)."""

    code = "CATALOG_NOT_FOUND"


def embedded_file(catalog: CatalogConfig) -> Path | None:
    """The SQLite file of an embedded catalog (``type: jdbc`` without ``uri``, a local
    warehouse), else ``None``."""
    if catalog.type != "jdbc" or catalog.uri:
        return None
    if "://" in catalog.warehouse and not catalog.warehouse.startswith("file:"):
        return None
    return Path(catalog.warehouse.removeprefix("file:")).resolve() / CATALOG_FILE


def check_exists(catalog: CatalogConfig) -> None:
    """Refuse a local catalog that is not there: an embedded catalog's SQLite file, a Hadoop
    catalog's warehouse folder (``CATALOG_NOT_FOUND``, naming what is there instead)."""
    found = embedded_file(catalog)
    if catalog.type == "hadoop" and "://" not in catalog.warehouse:
        found = Path(catalog.warehouse).resolve()
    if found is None or found.exists():
        return
    folder = found.parent if found.name == CATALOG_FILE else found
    if not folder.exists():
        parent = folder.parent
        near = sorted(p.name for p in parent.iterdir() if p.is_dir()) if parent.is_dir() else []
        there = f"; {parent} holds: {', '.join(near[:10])}" if near else ""
        raise CatalogNotFound(
            f"catalog {catalog.name!r}: warehouse {folder} does not exist{there}",
            hint="check catalog.warehouse in the configuration (relative paths are read from "
            "the configuration file's folder); a read command never creates a catalog",
        )
    raise CatalogNotFound(
        f"catalog {catalog.name!r}: warehouse {folder} holds no catalog ({found.name} is "
        "missing): no pipeline has run with it",
        hint="run the pipeline first, or check catalog.warehouse in the configuration",
    )


def open_catalog(catalog: CatalogConfig) -> IcebergCatalog:
    """The catalog, opened with pyiceberg; :class:`CatalogUnreadable` when pyiceberg cannot
    open this kind, :class:`CatalogNotFound` when an embedded catalog does not exist."""
    check_exists(catalog)
    options = dict(catalog.options)
    if catalog.type == "jdbc":
        return _sql(catalog.name, _sql_uri(catalog, options))
    if catalog.type == "rest":
        from pyiceberg.catalog.rest import RestCatalog

        if not catalog.uri:
            raise CatalogUnreadable("a REST catalog without uri")
        props = {k: v for k, v in options.items() if not k.startswith("jdbc.")}
        if catalog.warehouse and "warehouse" not in props:
            props["warehouse"] = catalog.warehouse
        return RestCatalog(catalog.name, uri=catalog.uri, **props)
    if catalog.type == "hadoop":
        raise CatalogUnreadable("a Hadoop catalog keeps no list of its tables that pyiceberg reads")
    raise CatalogUnreadable(
        f"pyiceberg needs libraries cdcflow does not install for a {catalog.type} catalog"
    )


def _sql_uri(catalog: CatalogConfig, options: dict[str, str]) -> str:
    """The SQLAlchemy URL of a JDBC catalog: the embedded SQLite file read-only, or a
    PostgreSQL database with the catalog's ``jdbc.user`` and ``jdbc.password``."""
    found = embedded_file(catalog)
    if found is not None:
        return f"sqlite:///file:{quote(str(found))}?mode=ro&uri=true"
    uri = catalog.uri or ""
    if uri.startswith("jdbc:sqlite:"):
        path = uri.removeprefix("jdbc:sqlite:")
        if not Path(path).exists():
            raise CatalogNotFound(f"catalog {catalog.name!r}: {path} does not exist")
        return f"sqlite:///file:{quote(path)}?mode=ro&uri=true"
    if uri.startswith("jdbc:postgresql:"):
        parts = urlsplit(uri.removeprefix("jdbc:"))
        query = dict(parse_qsl(parts.query))
        user = options.get("jdbc.user") or query.pop("user", "")
        password = options.get("jdbc.password") or query.pop("password", "")
        auth = quote(user, safe="") + (f":{quote(password, safe='')}" if password else "")
        host = parts.netloc.rsplit("@", 1)[-1]
        rest = "&".join(f"{k}={quote(v, safe='')}" for k, v in query.items())
        return f"postgresql+psycopg://{auth}@{host}{parts.path}" + (f"?{rest}" if rest else "")
    raise CatalogUnreadable(f"a JDBC catalog on {uri.split(':')[1] if ':' in uri else uri!r}")


def _sql(name: str, uri: str) -> IcebergCatalog:
    """pyiceberg's SQL catalog over ``uri``, never creating its tables."""
    if uri.startswith("postgresql"):
        try:
            import psycopg  # noqa: F401
        except ImportError as e:
            raise CatalogUnreadable("no PostgreSQL driver (psycopg) installed") from e
    from pyiceberg.catalog.sql import SqlCatalog

    return SqlCatalog(name, uri=uri, init_catalog_tables="false")
