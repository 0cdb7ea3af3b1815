import java.nio.charset.StandardCharsets;
import org.apache.kafka.common.utils.Utils;

/**
 * The answers partition of a thread, from Kafka's own Java client: what its default partitioner
 * picks for the key thread_id alone. Set it explicitly on the ProducerRecord, because the
 * record's key is composite (thread_id, 0x00, answer_id) and would hash elsewhere.
 *
 *   java -cp "KAFKA_LIBS/*" docs/snippets/Partition.java 6 thread-1 thread-2
 *
 * (KAFKA_LIBS: a directory holding kafka-clients and slf4j-api, e.g. what kafka.sh fetches)
 */
public class Partition {
    static int partitionFor(String threadId, int partitions) {
        byte[] key = threadId.getBytes(StandardCharsets.UTF_8);
        return Utils.toPositive(Utils.murmur2(key)) % partitions;
    }

    public static void main(String[] args) {
        int partitions = Integer.parseInt(args[0]);
        for (int i = 1; i < args.length; i++) {
            System.out.println(args[i] + " " + partitionFor(args[i], partitions));
        }
    }
}
