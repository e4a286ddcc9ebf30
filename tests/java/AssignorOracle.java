/*
 * The reference for lib/assignors: runs Kafka's own assignors (kafka-clients 4.3.1) over cases
 * read from stdin and prints what each returns. Single-file source program (JEP 330):
 *
 *   java -cp '.jars/kafka4/*' tests/java/AssignorOracle.java < cases.txt
 *
 * Input, one item per line, tokens separated by one space. A string token is "=" followed by
 * its UTF-8 bytes percent-encoded (so it has no spaces and may be empty); "-" is null.
 *
 *   case <label>
 *   topic <name> <partitions>                      (the cluster metadata; none with 0 partitions)
 *   member <id> <groupInstanceId|-> <generationId> <rackId|-> <userData> <n> <topic>... <m> (<topic> <partition>)...
 *          userData: "-" (null) or "x" followed by hex bytes; generationId < 0: absent
 *   end                                            (runs the four assignors on the case)
 *   encode <label> <generation|-> <m> (<topic> <partition>)...
 *          (StickyAssignor.serializeTopicPartitionAssignment of those partitions)
 *
 * Output, per case: "case <label>", then per assignor "<name> ok <members>" followed by one
 * "m <id> <n> (<topic> <partition>)..." line per member in the returned map, or
 * "<name> error <ExceptionSimpleName>"; then "end". Per encode: "encoded <label> <hex>".
 *
 * Each assignor runs as the consumer group leader runs it (ConsumerCoordinator.onLeaderElected):
 * a new assignor instance, the subscriptions put into a HashMap in the order the members are
 * listed, then assign(Cluster, GroupSubscription) with a Cluster whose partitions have no racks.
 */

import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.GroupSubscription;
import org.apache.kafka.clients.consumer.ConsumerPartitionAssignor.Subscription;
import org.apache.kafka.clients.consumer.CooperativeStickyAssignor;
import org.apache.kafka.clients.consumer.RangeAssignor;
import org.apache.kafka.clients.consumer.RoundRobinAssignor;
import org.apache.kafka.clients.consumer.StickyAssignor;
import org.apache.kafka.clients.consumer.internals.AbstractStickyAssignor.MemberData;
import org.apache.kafka.common.Cluster;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.PartitionInfo;
import org.apache.kafka.common.TopicPartition;

import java.io.BufferedReader;
import java.io.ByteArrayOutputStream;
import java.io.FileDescriptor;
import java.io.FileOutputStream;
import java.io.InputStreamReader;
import java.io.PrintStream;
import java.lang.reflect.Method;
import java.nio.ByteBuffer;
import java.nio.charset.StandardCharsets;
import java.util.ArrayList;
import java.util.Collections;
import java.util.HashMap;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
import java.util.Optional;
import java.util.function.Supplier;

public class AssignorOracle {

    static final class MemberSpec {
        String memberId;
        String groupInstanceId;
        int generationId;
        String rackId;
        byte[] userData;
        List<String> topics = new ArrayList<>();
        List<TopicPartition> owned = new ArrayList<>();
    }

    private static final String[] NAMES = {"range", "roundrobin", "sticky", "cooperative-sticky"};

    public static void main(String[] args) throws Exception {
        // Kafka's classes log (errors included) through slf4j -> log4j2, whose default console
        // appender writes to System.out: give them stderr, keep stdout for the results.
        PrintStream out = new PrintStream(new FileOutputStream(FileDescriptor.out), false, StandardCharsets.UTF_8);
        System.setOut(System.err);

        BufferedReader in = new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8));
        String label = null;
        Map<String, Integer> topics = new LinkedHashMap<>();
        List<MemberSpec> members = new ArrayList<>();
        String line;
        while ((line = in.readLine()) != null) {
            if (line.isEmpty())
                continue;
            String[] tok = line.split(" ", -1);
            switch (tok[0]) {
                case "case":
                    label = tok[1];
                    topics = new LinkedHashMap<>();
                    members = new ArrayList<>();
                    break;
                case "topic":
                    topics.put(str(tok[1]), Integer.parseInt(tok[2]));
                    break;
                case "member":
                    members.add(parseMember(tok));
                    break;
                case "end":
                    runCase(out, label, topics, members);
                    break;
                case "encode":
                    encode(out, tok);
                    break;
                default:
                    throw new IllegalArgumentException("bad line: " + line);
            }
        }
        out.flush();
    }

    private static MemberSpec parseMember(String[] tok) {
        MemberSpec m = new MemberSpec();
        int i = 1;
        m.memberId = str(tok[i++]);
        m.groupInstanceId = str(tok[i++]);
        m.generationId = Integer.parseInt(tok[i++]);
        m.rackId = str(tok[i++]);
        String userData = tok[i++];
        m.userData = userData.equals("-") ? null : hex(userData.substring(1));
        int n = Integer.parseInt(tok[i++]);
        for (int k = 0; k < n; k++)
            m.topics.add(str(tok[i++]));
        int owned = Integer.parseInt(tok[i++]);
        for (int k = 0; k < owned; k++) {
            String topic = str(tok[i++]);
            m.owned.add(new TopicPartition(topic, Integer.parseInt(tok[i++])));
        }
        return m;
    }

    private static void runCase(PrintStream out, String label, Map<String, Integer> topics, List<MemberSpec> members) {
        out.println("case " + label);
        Node node = new Node(0, "localhost", 9092);  // no rack
        Node[] replicas = {node};
        List<PartitionInfo> partitions = new ArrayList<>();
        topics.forEach((topic, count) -> {
            for (int p = 0; p < count; p++)
                partitions.add(new PartitionInfo(topic, p, node, replicas, replicas));
        });
        Cluster cluster = new Cluster("oracle", Collections.singletonList(node), partitions,
            Collections.emptySet(), Collections.emptySet());

        for (String name : NAMES) {
            ConsumerPartitionAssignor assignor = newAssignor(name);
            // fresh Subscriptions (their userData buffers get read) and a HashMap, as the leader has
            Map<String, Subscription> subscriptions = new HashMap<>();
            for (MemberSpec m : members) {
                Subscription s = new Subscription(new ArrayList<>(m.topics),
                    m.userData == null ? null : ByteBuffer.wrap(m.userData.clone()),
                    new ArrayList<>(m.owned), m.generationId, Optional.ofNullable(m.rackId));
                s.setGroupInstanceId(Optional.ofNullable(m.groupInstanceId));
                subscriptions.put(m.memberId, s);
            }
            Map<String, ConsumerPartitionAssignor.Assignment> result;
            try {
                result = assignor.assign(cluster, new GroupSubscription(subscriptions)).groupAssignment();
            } catch (Throwable t) {
                out.println(name + " error " + t.getClass().getSimpleName());
                continue;
            }
            out.println(name + " ok " + result.size());
            for (Map.Entry<String, ConsumerPartitionAssignor.Assignment> e : result.entrySet()) {
                List<TopicPartition> tps = e.getValue().partitions();
                StringBuilder sb = new StringBuilder("m ").append(enc(e.getKey())).append(' ').append(tps.size());
                for (TopicPartition tp : tps)
                    sb.append(' ').append(enc(tp.topic())).append(' ').append(tp.partition());
                out.println(sb);
            }
        }
        out.println("end");
    }

    private static ConsumerPartitionAssignor newAssignor(String name) {
        Map<String, Supplier<ConsumerPartitionAssignor>> all = Map.of(
            "range", RangeAssignor::new,
            "roundrobin", RoundRobinAssignor::new,
            "sticky", StickyAssignor::new,
            "cooperative-sticky", CooperativeStickyAssignor::new);
        return all.get(name).get();
    }

    private static void encode(PrintStream out, String[] tok) throws Exception {
        String label = tok[1];
        Optional<Integer> generation = tok[2].equals("-") ? Optional.empty() : Optional.of(Integer.parseInt(tok[2]));
        int n = Integer.parseInt(tok[3]);
        List<TopicPartition> partitions = new ArrayList<>();
        for (int k = 0, i = 4; k < n; k++) {
            String topic = str(tok[i++]);
            partitions.add(new TopicPartition(topic, Integer.parseInt(tok[i++])));
        }
        // package-private ("visible for testing"): reach it by reflection
        Method serialize = StickyAssignor.class.getDeclaredMethod("serializeTopicPartitionAssignment", MemberData.class);
        serialize.setAccessible(true);
        String hex;
        try {
            ByteBuffer buffer = (ByteBuffer) serialize.invoke(null, new MemberData(partitions, generation));
            byte[] bytes = new byte[buffer.remaining()];
            buffer.get(bytes);
            hex = hexOf(bytes);
        } catch (java.lang.reflect.InvocationTargetException e) {
            hex = "error:" + e.getCause().getClass().getSimpleName();
        }
        out.println("encoded " + label + " " + hex);
    }

    // -- tokens -------------------------------------------------------------------------------

    static String str(String token) {
        if (token.equals("-"))
            return null;
        if (!token.startsWith("="))
            throw new IllegalArgumentException("bad string token: " + token);
        ByteArrayOutputStream bytes = new ByteArrayOutputStream();
        for (int i = 1; i < token.length(); i++) {
            char c = token.charAt(i);
            if (c == '%') {
                bytes.write(Integer.parseInt(token.substring(i + 1, i + 3), 16));
                i += 2;
            } else {
                bytes.write(c);
            }
        }
        return new String(bytes.toByteArray(), StandardCharsets.UTF_8);
    }

    static String enc(String s) {
        StringBuilder sb = new StringBuilder("=");
        for (byte b : s.getBytes(StandardCharsets.UTF_8)) {
            int c = b & 0xff;
            if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '.' || c == '-' || c == '~')
                sb.append((char) c);
            else
                sb.append('%').append(String.format("%02X", c));
        }
        return sb.toString();
    }

    static byte[] hex(String s) {
        byte[] out = new byte[s.length() / 2];
        for (int i = 0; i < out.length; i++)
            out[i] = (byte) Integer.parseInt(s.substring(2 * i, 2 * i + 2), 16);
        return out;
    }

    static String hexOf(byte[] bytes) {
        StringBuilder sb = new StringBuilder();
        for (byte b : bytes)
            sb.append(String.format("%02x", b & 0xff));
        return sb.toString();
    }
}
