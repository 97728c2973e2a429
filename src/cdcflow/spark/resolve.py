"""Resolve Maven coordinates with Spark's own resolver and print the jar files (``JAR <path>``
lines): ``python -m cdcflow.spark.resolve IVY_DIR COORDINATE...``, from Maven Central or
``$CDCFLOW_MAVEN_REPOSITORY``.

Run in a child process by :func:`cdcflow.spark.jars.resolve`: launching Spark's gateway
with ``spark.jars.packages`` makes ``spark-submit`` resolve them (into ``IVY_DIR``) and name
the files in ``spark.jars``; no SparkContext is started. Files that Spark itself ships in the
same version (Hadoop's client, compression codecs) are left out.
"""

from __future__ import annotations

import sys
from xml.sax.saxutils import quoteattr

from cdcflow.spark.jars import local_paths, repository


def ivy_settings(repository: str | None) -> str:
    """Ivy's settings: one Maven repository, Maven Central (Ivy's default root for an
    m2-compatible resolver) unless ``repository`` names another. Spark's own settings look in
    ~/.m2 first, where Maven leaves a module's pom without its jar when it chose another
    version of it, and then fail to download that jar."""
    root = f" root={quoteattr(repository)}" if repository else ""
    return f"""<ivysettings>
  <settings defaultResolver="central"/>
  <resolvers>
    <ibiblio name="central" m2compatible="true"{root}/>
  </resolvers>
</ivysettings>
"""


def main(argv: list[str]) -> int:
    """Resolve ``argv[1:]`` into the Ivy folder ``argv[0]``; print each jar file."""
    if len(argv) < 2:
        print("usage: python -m cdcflow.spark.resolve IVY_DIR COORDINATE...", file=sys.stderr)
        return 2
    from pathlib import Path

    from pyspark import SparkConf, SparkContext

    ivy = Path(argv[0])
    ivy.mkdir(parents=True, exist_ok=True)
    settings = ivy / "ivysettings.xml"
    settings.write_text(ivy_settings(repository()))
    conf = SparkConf(loadDefaults=False)
    conf.set("spark.jars.packages", ",".join(argv[1:])).set("spark.jars.ivy", str(ivy))
    conf.set("spark.jars.ivySettings", str(settings))
    SparkContext._ensure_initialized(conf=conf)
    jvm = SparkContext._jvm
    assert jvm is not None
    shipped = _spark_jars()
    for jar in local_paths(jvm.org.apache.spark.SparkConf(True).get("spark.jars", ""), ivy):
        # Ivy names a file <group>_<artifact>-<version>.jar, Spark's own <artifact>-<version>.jar
        if Path(jar).name.split("_", 1)[-1] not in shipped:
            print(f"JAR {jar}")
    return 0


def _spark_jars() -> set[str]:
    """File names of the jars the running Spark ships."""
    import os
    from pathlib import Path

    import pyspark

    home = os.environ.get("SPARK_HOME")
    folder = Path(home) / "jars" if home else Path(pyspark.__file__).parent / "jars"
    return {p.name for p in folder.glob("*.jar")}


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
