// Test-only: Apache Kafka's own generated codec and record classes as a byte oracle for our codec.
//
// One long-lived JVM per Kafka release per test session (tests/kafka/oracle.py compiles this file
// against the release's jars into the cache and starts it). Protocol: one JSON object per line on
// stdin, one JSON object per line on stdout, in order; binary as lowercase hex. Every answer has
// "ok" (false with "error" = the exception's class and message). Operations ("op"):
//
//   describe        Kafka's ApiMessageType and MetadataRecordType: keys, names, version ranges.
//   read            {kind, key|name, version, hex}: read the bytes with Kafka's generated class,
//                   require every byte consumed, answer {name, hex: what Kafka writes back,
//                   json: <Name>JsonConverter.write(message, version)}.
//   write           {kind, key|name, version, json}: <Name>JsonConverter.read(json, version), then
//                   Kafka writes it: {hex}.
//   default         {kind, key|name, version}: Kafka's default-constructed message written at the
//                   version: {hex, json} (the defaults of the spec Kafka was built from).
//   check           read and write in one line: {read: {...}, write: {...}}; with "frame" (hex of
//                   a framed metadata record) also {frame: {...}} as for the frame op, with
//                   "default": true also {default: {...}} as for the default op.
//   frame           {frame}: a framed metadata record through MetadataRecordSerde (what a Kafka
//                   node's Raft client decodes): {key, version, name, hex written back}.
//   batches_read    {hex}: MemoryRecords.readableRecords; every batch's ensureValid(), header
//                   fields and records (control records with their ControlRecordType).
//   batches_build   {batches: [...]}: batches built with MemoryRecordsBuilder / MemoryRecords.with*.
//   many            {requests: [...]}: several of the above in one line: {results: [...]}.
//
// kind is request | response (key = api key, through ApiMessageType), metadata (key = record
// type, through MetadataRecordType), or data (name = the generated class, e.g.
// LeaderChangeMessage, QuorumStateData). The record classes live in
// org.apache.kafka.common.record.internal since 4.4 and in org.apache.kafka.common.record before;
// the Python side rewrites the imports below for older releases before compiling.

import com.fasterxml.jackson.databind.JsonNode;
import com.fasterxml.jackson.databind.ObjectMapper;
import com.fasterxml.jackson.databind.node.ArrayNode;
import com.fasterxml.jackson.databind.node.JsonNodeFactory;
import com.fasterxml.jackson.databind.node.ObjectNode;

import org.apache.kafka.common.compress.Compression;
import org.apache.kafka.common.header.Header;
import org.apache.kafka.common.header.internals.RecordHeader;
import org.apache.kafka.common.message.ApiMessageType;
import org.apache.kafka.common.message.LeaderChangeMessage;
import org.apache.kafka.common.message.SnapshotFooterRecord;
import org.apache.kafka.common.message.SnapshotHeaderRecord;
import org.apache.kafka.common.metadata.MetadataRecordType;
import org.apache.kafka.common.protocol.ApiMessage;
import org.apache.kafka.common.protocol.ByteBufferAccessor;
import org.apache.kafka.common.protocol.Message;
import org.apache.kafka.common.protocol.ObjectSerializationCache;
import org.apache.kafka.common.record.TimestampType;
import org.apache.kafka.common.record.internal.ControlRecordType;
import org.apache.kafka.common.record.internal.EndTransactionMarker;
import org.apache.kafka.common.record.internal.MemoryRecords;
import org.apache.kafka.common.record.internal.MemoryRecordsBuilder;
import org.apache.kafka.common.record.internal.MutableRecordBatch;
import org.apache.kafka.common.record.internal.Record;
import org.apache.kafka.common.record.internal.RecordBatch;
import org.apache.kafka.metadata.MetadataRecordSerde;
import org.apache.kafka.server.common.ApiMessageAndVersion;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.OutputStreamWriter;
import java.io.PrintWriter;
import java.lang.reflect.InvocationTargetException;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.HashMap;
import java.util.HexFormat;
import java.util.List;
import java.util.Map;

public final class Oracle {
    private static final ObjectMapper MAPPER = new ObjectMapper();
    private static final JsonNodeFactory NODES = JsonNodeFactory.instance;
    private static final HexFormat HEX = HexFormat.of();
    private static final String[] PACKAGES = {
        "org.apache.kafka.common.message.",
        "org.apache.kafka.common.metadata.",
        "org.apache.kafka.raft.generated.",
    };
    private static final Map<Class<?>, Method[]> CONVERTERS = new HashMap<>();

    public static void main(String[] args) throws Exception {
        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        PrintWriter out = new PrintWriter(new OutputStreamWriter(System.out, StandardCharsets.UTF_8), false);
        ObjectNode hello = NODES.objectNode();
        hello.put("ok", true);
        hello.put("ready", true);
        out.println(MAPPER.writeValueAsString(hello));
        out.flush();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty()) {
                continue;
            }
            ObjectNode answer;
            try {
                answer = handle(MAPPER.readTree(line));
            } catch (Throwable t) {
                answer = failure(t);
            }
            out.println(MAPPER.writeValueAsString(answer));
            out.flush();
        }
    }

    private static ObjectNode failure(Throwable t) {
        while (t instanceof InvocationTargetException && t.getCause() != null) {
            t = t.getCause();
        }
        ObjectNode node = NODES.objectNode();
        node.put("ok", false);
        node.put("error", t.getClass().getSimpleName() + ": " + t.getMessage());
        return node;
    }

    private static ObjectNode handle(JsonNode req) throws Exception {
        String op = req.path("op").asText();
        switch (op) {
            case "describe":
                return describe();
            case "read":
                return guarded(() -> read(req));
            case "write":
                return guarded(() -> write(req));
            case "check": {
                ObjectNode node = ok();
                node.set("read", guarded(() -> read(req)));
                node.set("write", guarded(() -> write(req)));
                if (req.path("default").asBoolean(false)) {
                    node.set("default", guarded(() -> defaults(req)));
                }
                if (req.has("frame")) {
                    node.set("frame", guarded(() -> frame(req)));
                }
                return node;
            }
            case "frame":
                return guarded(() -> frame(req));
            case "default":
                return guarded(() -> defaults(req));
            case "batches_read":
                return guarded(() -> batchesRead(req));
            case "batches_build":
                return guarded(() -> batchesBuild(req));
            case "many": {
                ArrayNode results = NODES.arrayNode();
                for (JsonNode r : req.path("requests")) {
                    ObjectNode one;
                    try {
                        one = handle(r);
                    } catch (Throwable t) {
                        one = failure(t);
                    }
                    results.add(one);
                }
                ObjectNode node = ok();
                node.set("results", results);
                return node;
            }
            default:
                throw new IllegalArgumentException("unknown op " + op);
        }
    }

    private interface Op {
        ObjectNode run() throws Exception;
    }

    private static ObjectNode guarded(Op op) {
        try {
            return op.run();
        } catch (Throwable t) {
            return failure(t);
        }
    }

    private static ObjectNode ok() {
        ObjectNode node = NODES.objectNode();
        node.put("ok", true);
        return node;
    }

    // ------------------------------------------------------------------------------- messages

    private static ObjectNode describe() {
        ObjectNode node = ok();
        ArrayNode apis = NODES.arrayNode();
        for (ApiMessageType t : ApiMessageType.values()) {
            ObjectNode a = NODES.objectNode();
            a.put("key", t.apiKey());
            a.put("name", t.name);
            try {
                a.put("request", t.newRequest().getClass().getSimpleName());
                a.put("response", t.newResponse().getClass().getSimpleName());
            } catch (RuntimeException e) {  // an API Kafka has removed (validVersions none)
                a.putNull("request");
                a.putNull("response");
            }
            a.put("lowest", t.lowestSupportedVersion());
            a.put("highest", t.highestSupportedVersion(true));
            a.put("latestVersionUnstable", t.latestVersionUnstable());
            apis.add(a);
        }
        node.set("apis", apis);
        ArrayNode records = NODES.arrayNode();
        for (MetadataRecordType t : MetadataRecordType.values()) {
            ObjectNode r = NODES.objectNode();
            r.put("key", t.id());
            r.put("name", t.newMetadataRecord().getClass().getSimpleName());
            r.put("lowest", t.lowestSupportedVersion());
            r.put("highest", t.highestSupportedVersion());
            records.add(r);
        }
        node.set("records", records);
        return node;
    }

    private static Message newMessage(JsonNode req) throws Exception {
        String kind = req.path("kind").asText();
        switch (kind) {
            case "request":
                return ApiMessageType.fromApiKey((short) req.path("key").asInt()).newRequest();
            case "response":
                return ApiMessageType.fromApiKey((short) req.path("key").asInt()).newResponse();
            case "metadata":
                return MetadataRecordType.fromId((short) req.path("key").asInt()).newMetadataRecord();
            case "data": {
                String name = req.path("name").asText();
                for (String pkg : PACKAGES) {
                    try {
                        return (Message) Class.forName(pkg + name).getConstructor().newInstance();
                    } catch (ClassNotFoundException e) {
                        // next package
                    }
                }
                throw new ClassNotFoundException(name);
            }
            default:
                throw new IllegalArgumentException("unknown kind " + kind);
        }
    }

    /** {read(JsonNode, short), write(X, short)} of the generated converter of msg's class. */
    private static Method[] converter(Class<?> cls) throws Exception {
        Method[] found = CONVERTERS.get(cls);
        if (found == null) {
            Class<?> conv = Class.forName(cls.getName() + "JsonConverter");
            found = new Method[] {
                conv.getMethod("read", JsonNode.class, short.class),
                conv.getMethod("write", cls, short.class),
            };
            CONVERTERS.put(cls, found);
        }
        return found;
    }

    private static byte[] serialize(Message msg, short version) {
        ObjectSerializationCache cache = new ObjectSerializationCache();
        int size = msg.size(cache, version);
        ByteBuffer buf = ByteBuffer.allocate(size);
        msg.write(new ByteBufferAccessor(buf), cache, version);
        if (buf.hasRemaining()) {
            throw new IllegalStateException("size() said " + size + " but write() left "
                + buf.remaining() + " bytes unwritten");
        }
        return buf.array();
    }

    private static ObjectNode read(JsonNode req) throws Exception {
        Message msg = newMessage(req);
        short version = (short) req.path("version").asInt();
        ByteBuffer buf = ByteBuffer.wrap(HEX.parseHex(req.path("hex").asText()));
        msg.read(new ByteBufferAccessor(buf), version);
        if (buf.hasRemaining()) {
            throw new IllegalStateException(buf.remaining() + " byte(s) left after reading "
                + msg.getClass().getSimpleName() + " v" + version);
        }
        ObjectNode node = ok();
        node.put("name", msg.getClass().getSimpleName());
        node.put("hex", HEX.formatHex(serialize(msg, version)));
        node.set("json", (JsonNode) converter(msg.getClass())[1].invoke(null, msg, version));
        return node;
    }

    private static ObjectNode write(JsonNode req) throws Exception {
        Message proto = newMessage(req);
        short version = (short) req.path("version").asInt();
        Message msg = (Message) converter(proto.getClass())[0].invoke(null, req.path("json"), version);
        ObjectNode node = ok();
        node.put("name", msg.getClass().getSimpleName());
        node.put("hex", HEX.formatHex(serialize(msg, version)));
        return node;
    }

    /** Kafka's default-constructed message (every field at its spec default) written at the
     * version: {hex, json}. */
    private static ObjectNode defaults(JsonNode req) throws Exception {
        Message msg = newMessage(req);
        short version = (short) req.path("version").asInt();
        ObjectNode node = ok();
        node.put("hex", HEX.formatHex(serialize(msg, version)));
        node.set("json", (JsonNode) converter(msg.getClass())[1].invoke(null, msg, version));
        return node;
    }

    /** A framed metadata record (the value of a record in __cluster_metadata) through
     * MetadataRecordSerde, as a Kafka node's Raft client reads it: {key, version, name, hex:
     * the frame Kafka writes back}. */
    private static ObjectNode frame(JsonNode req) {
        byte[] data = HEX.parseHex(req.path("frame").asText());
        ByteBuffer buf = ByteBuffer.wrap(data);
        ApiMessageAndVersion record = MetadataRecordSerde.INSTANCE.read(new ByteBufferAccessor(buf), data.length);
        if (buf.hasRemaining()) {
            throw new IllegalStateException(buf.remaining() + " byte(s) left after the record");
        }
        ObjectSerializationCache cache = new ObjectSerializationCache();
        ByteBuffer out = ByteBuffer.allocate(MetadataRecordSerde.INSTANCE.recordSize(record, cache));
        MetadataRecordSerde.INSTANCE.write(record, cache, new ByteBufferAccessor(out));
        ObjectNode node = ok();
        node.put("key", record.message().apiKey());
        node.put("version", record.version());
        node.put("name", record.message().getClass().getSimpleName());
        node.put("hex", HEX.formatHex(out.array()));
        return node;
    }

    // ------------------------------------------------------------------------------- batches

    private static JsonNode bytesNode(ByteBuffer b) {
        if (b == null) {
            return NODES.nullNode();
        }
        byte[] a = new byte[b.remaining()];
        b.duplicate().get(a);
        return NODES.textNode(HEX.formatHex(a));
    }

    private static ObjectNode batchesRead(JsonNode req) {
        byte[] data = HEX.parseHex(req.path("hex").asText());
        MemoryRecords records = MemoryRecords.readableRecords(ByteBuffer.wrap(data));
        ArrayNode batches = NODES.arrayNode();
        int covered = 0;
        for (MutableRecordBatch batch : records.batches()) {
            ObjectNode b = NODES.objectNode();
            try {
                batch.ensureValid();
                b.put("valid", true);
            } catch (Exception e) {
                b.put("valid", false);
                b.put("error", e.getClass().getSimpleName() + ": " + e.getMessage());
                batches.add(b);
                covered += batch.sizeInBytes();
                continue;
            }
            b.put("baseOffset", batch.baseOffset());
            b.put("lastOffset", batch.lastOffset());
            b.put("sizeInBytes", batch.sizeInBytes());
            b.put("partitionLeaderEpoch", batch.partitionLeaderEpoch());
            b.put("magic", batch.magic());
            b.put("checksum", batch.checksum());
            b.put("compression", batch.compressionType().name);
            b.put("timestampType", batch.timestampType().name);
            b.put("transactional", batch.isTransactional());
            b.put("control", batch.isControlBatch());
            b.put("producerId", batch.producerId());
            b.put("producerEpoch", batch.producerEpoch());
            b.put("baseSequence", batch.baseSequence());
            b.put("lastSequence", batch.lastSequence());
            b.put("maxTimestamp", batch.maxTimestamp());
            b.put("count", batch.countOrNull());
            ArrayNode recs = NODES.arrayNode();
            for (Record r : batch) {
                r.ensureValid();
                ObjectNode rec = NODES.objectNode();
                rec.put("offset", r.offset());
                rec.put("timestamp", r.timestamp());
                rec.put("sequence", r.sequence());
                rec.set("key", bytesNode(r.key()));
                rec.set("value", bytesNode(r.value()));
                ArrayNode headers = NODES.arrayNode();
                for (Header h : r.headers()) {
                    ObjectNode hn = NODES.objectNode();
                    hn.put("key", h.key());
                    hn.set("value", h.value() == null ? NODES.nullNode()
                        : NODES.textNode(HEX.formatHex(h.value())));
                    headers.add(hn);
                }
                rec.set("headers", headers);
                if (batch.isControlBatch()) {
                    ControlRecordType type = ControlRecordType.parse(r.key());
                    rec.put("controlType", type.type());
                    rec.put("controlTypeName", type.name());
                }
                recs.add(rec);
            }
            b.set("records", recs);
            batches.add(b);
            covered += batch.sizeInBytes();
        }
        ObjectNode node = ok();
        node.set("batches", batches);
        node.put("sizeInBytes", records.sizeInBytes());
        node.put("bytesInBatches", covered);
        return node;
    }

    private static byte[] hexOrNull(JsonNode n) {
        return n == null || n.isNull() ? null : HEX.parseHex(n.asText());
    }

    private static Message controlMessage(String name, JsonNode json) throws Exception {
        ObjectNode fake = NODES.objectNode();
        fake.put("kind", "data");
        fake.put("name", name);
        Message proto = newMessage(fake);
        return (Message) converter(proto.getClass())[0].invoke(null, json, (short) 0);
    }

    /** One batch (spec below) appended to out. */
    private static MemoryRecords buildOne(JsonNode spec) throws Exception {
        long baseOffset = spec.path("baseOffset").asLong(0);
        int epoch = spec.path("partitionLeaderEpoch").asInt(-1);
        long timestamp = spec.path("timestamp").asLong(0);
        String control = spec.path("control").asText("");
        ByteBuffer buffer = ByteBuffer.allocate(spec.path("capacity").asInt(1 << 16));
        switch (control) {
            case "LEADER_CHANGE":
                return MemoryRecords.withLeaderChangeMessage(baseOffset, timestamp, epoch, buffer,
                    (LeaderChangeMessage) controlMessage("LeaderChangeMessage", spec.path("message")));
            case "SNAPSHOT_HEADER":
                return MemoryRecords.withSnapshotHeaderRecord(baseOffset, timestamp, epoch, buffer,
                    (SnapshotHeaderRecord) controlMessage("SnapshotHeaderRecord", spec.path("message")));
            case "SNAPSHOT_FOOTER":
                return MemoryRecords.withSnapshotFooterRecord(baseOffset, timestamp, epoch, buffer,
                    (SnapshotFooterRecord) controlMessage("SnapshotFooterRecord", spec.path("message")));
            case "COMMIT":
            case "ABORT":
                return MemoryRecords.withEndTransactionMarker(baseOffset, timestamp, epoch,
                    spec.path("producerId").asLong(), (short) spec.path("producerEpoch").asInt(),
                    new EndTransactionMarker(ControlRecordType.valueOf(control),
                        spec.path("coordinatorEpoch").asInt()));
            case "":
                break;
            default:
                throw new IllegalArgumentException("unknown control type " + control);
        }
        String compression = spec.path("compression").asText("none");
        MemoryRecordsBuilder builder = new MemoryRecordsBuilder(
            buffer,
            RecordBatch.MAGIC_VALUE_V2,
            compression.equals("gzip") ? Compression.gzip().build() : Compression.NONE,
            spec.path("logAppendTime").asBoolean(false) ? TimestampType.LOG_APPEND_TIME
                : TimestampType.CREATE_TIME,
            baseOffset,
            timestamp,
            spec.path("producerId").asLong(-1),
            (short) spec.path("producerEpoch").asInt(-1),
            spec.path("baseSequence").asInt(-1),
            spec.path("transactional").asBoolean(false),
            false,
            epoch,
            buffer.capacity());
        for (JsonNode r : spec.path("records")) {
            List<Header> headers = new ArrayList<>();
            for (JsonNode h : r.path("headers")) {
                headers.add(new RecordHeader(h.path("key").asText(), hexOrNull(h.get("value"))));
            }
            builder.appendWithOffset(r.path("offset").asLong(), r.path("timestamp").asLong(),
                hexOrNull(r.get("key")), hexOrNull(r.get("value")), headers.toArray(new Header[0]));
        }
        return builder.build();
    }

    private static ObjectNode batchesBuild(JsonNode req) throws Exception {
        StringBuilder hex = new StringBuilder();
        for (JsonNode spec : req.path("batches")) {
            MemoryRecords one = buildOne(spec);
            ByteBuffer b = one.buffer();
            byte[] a = new byte[b.remaining()];
            b.duplicate().get(a);
            hex.append(HEX.formatHex(a));
        }
        ObjectNode node = ok();
        node.put("hex", hex.toString());
        return node;
    }
}
