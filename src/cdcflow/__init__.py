"""cdcflow: CDC messages of every dialect → exact Apache Iceberg replicas on Spark."""
