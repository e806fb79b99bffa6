"""``python -m kafka_rpc.cli``: the ``kafka-rpc`` command (:func:`kafka_rpc.cli.main`)."""

import sys

from kafka_rpc.cli import main

if __name__ == "__main__":
    sys.exit(main())
