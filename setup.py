"""Build of the optional native decoder; everything else is configured in pyproject.toml."""

from setuptools import Extension, setup

setup(
    ext_modules=[
        Extension(
            "kafka_rpc.protocol._cdecode",
            ["kafka_rpc/protocol/_cdecode.c"],
            extra_compile_args=["-O2", "-Wall"],
            # Without a C compiler the install still succeeds and the generated Python readers
            # decode (slower, same results).
            optional=True,
        ),
        # The server's per-frame path (frames.py has the pure-Python reference).
        Extension(
            "kafka_rpc.protocol._cframes",
            ["kafka_rpc/protocol/_cframes.c"],
            extra_compile_args=["-O2", "-Wall"],
            optional=True,
        ),
        # RecordBatch v2 records (record_batch.py has the pure-Python reference).
        Extension(
            "kafka_rpc.protocol._crecords",
            ["kafka_rpc/protocol/_crecords.c"],
            extra_compile_args=["-O2", "-Wall"],
            optional=True,
        ),
    ]
)
