"""Settings for the short-lived ``cdcflow`` processes that tests start (crashes, signals)."""

from __future__ import annotations

#: A driver JVM tuned for a short life: the quick (C1) compiler only and a serial collector
#: start a pipeline process about a third faster; long-running pipelines should not copy it.
SHORT_RUN_CONF: dict[str, str] = {
    "spark.driver.extraJavaOptions": "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC",
}
