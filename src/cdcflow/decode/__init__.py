"""The decode stage: files and raw messages → canonical events, rejections and segments.

Below the engine and above the dialects: framing (which transport reads a file), dialect
detection, the :class:`~cdcflow.decode.decoder.Decoder` used by ``cdcflow inspect``, the HTTP
receiver and Spark workers, the rules for split messages, and the Arrow column builder and
``mapInArrow`` functions of the Spark side (which import pyspark/pyarrow only when called).
"""
