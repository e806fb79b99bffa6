# kafka-rpc: one node (broker + controller, KRaft combined mode) on 9092/9093.
#   docker build -t kafka-rpc .
#   docker run -p 9092:9092 -p 9093:9093 -e ADVERTISED_HOST=localhost kafka-rpc
FROM python:3.11-slim

ENV PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    MALLOC_MMAP_THRESHOLD_=1048576 \
    MALLOC_TRIM_THRESHOLD_=8388608 \
    ADVERTISED_HOST=localhost \
    ADVERTISED_PORT=9092

WORKDIR /app
COPY . /app
# gcc builds the native decoder (kafka_rpc/protocol/_cdecode.c; optional, but 5x faster decode);
# then the same install as the README, non-editable, and the compiler is removed again.
RUN apt-get update \
 && apt-get install -y --no-install-recommends gcc libc6-dev \
 && python3 -m pip install --no-cache-dir . \
 && apt-get purge -y gcc libc6-dev && apt-get autoremove -y && rm -rf /var/lib/apt/lists/*

RUN mkdir -p /var/lib/kafka-rpc
VOLUME /var/lib/kafka-rpc
EXPOSE 9092 9093

# sh -c so that the advertised address comes from the environment; exec keeps signals working
CMD ["sh", "-c", "exec kafka-rpc serve \
  --override listeners=PLAINTEXT://0.0.0.0:9092,CONTROLLER://0.0.0.0:9093 \
  --override advertised.listeners=PLAINTEXT://${ADVERTISED_HOST}:${ADVERTISED_PORT} \
  --override controller.quorum.voters=1@127.0.0.1:9093 \
  --override log.dirs=/var/lib/kafka-rpc"]
