import java.util.ArrayList;
import java.util.List;
import java.util.Map;
import java.util.Properties;
import java.util.Set;
import java.util.TreeSet;
import java.util.concurrent.ExecutionException;
import java.util.concurrent.TimeUnit;

import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.clients.admin.AdminClientConfig;
import org.apache.kafka.clients.admin.AlterConfigOp;
import org.apache.kafka.clients.admin.ConfigEntry;
import org.apache.kafka.clients.admin.DescribeClusterResult;
import org.apache.kafka.clients.admin.GroupListing;
import org.apache.kafka.clients.admin.ListGroupsOptions;
import org.apache.kafka.clients.admin.NewPartitions;
import org.apache.kafka.clients.admin.NewTopic;
import org.apache.kafka.clients.admin.OffsetSpec;
import org.apache.kafka.clients.admin.RecordsToDelete;
import org.apache.kafka.clients.admin.TopicDescription;
import org.apache.kafka.clients.consumer.KafkaConsumer;
import org.apache.kafka.clients.consumer.OffsetAndMetadata;
import org.apache.kafka.clients.producer.KafkaProducer;
import org.apache.kafka.clients.producer.ProducerRecord;
import org.apache.kafka.common.KafkaFuture;
import org.apache.kafka.common.Node;
import org.apache.kafka.common.TopicPartition;
import org.apache.kafka.common.TopicPartitionInfo;
import org.apache.kafka.common.acl.AclBindingFilter;
import org.apache.kafka.common.config.ConfigResource;
import org.apache.kafka.common.serialization.ByteArrayDeserializer;
import org.apache.kafka.common.serialization.ByteArraySerializer;

/**
 * Kafka's own Java AdminClient (kafka-clients 4.3) driving oncelog's admin APIs, for
 * tests/admin/test_java_admin.py, which starts the broker or cluster and checks what this
 * prints.
 *
 * <p>Usage: {@code AdminDriver BOOTSTRAP TOPIC REPLICATION_FACTOR BROKER_ID STEP...}, steps
 * run in order: {@code cluster topics configs records groups acls} ({@code topics} creates the
 * topic the later steps use). Each step prints {@code key=value} lines; any failure ends the
 * program with its exception (exit status 1). BROKER_ID is the broker whose own dynamic
 * configuration is changed (the AdminClient sends that request to that broker itself).
 */
public final class AdminDriver {
    private static final long TIMEOUT_S = 60;

    public static void main(String[] args) throws Exception {
        String bootstrap = args[0];
        String topic = args[1];
        short replicationFactor = Short.parseShort(args[2]);
        String brokerId = args[3];
        Properties props = new Properties();
        props.put(AdminClientConfig.BOOTSTRAP_SERVERS_CONFIG, bootstrap);
        props.put(AdminClientConfig.DEFAULT_API_TIMEOUT_MS_CONFIG, "60000");
        try (Admin admin = Admin.create(props)) {
            for (int i = 4; i < args.length; i++) {
                switch (args[i]) {
                    case "cluster" -> cluster(admin);
                    case "topics" -> topics(admin, topic, replicationFactor);
                    case "configs" -> {
                        topicConfigs(admin, topic);
                        brokerConfigs(admin, brokerId);
                    }
                    case "records" -> records(admin, bootstrap, topic);
                    case "groups" -> groups(admin, bootstrap, topic);
                    case "acls" -> acls(admin);
                    default -> throw new IllegalArgumentException("unknown step " + args[i]);
                }
            }
        }
    }

    private static <T> T get(KafkaFuture<T> future) throws Exception {
        return future.get(TIMEOUT_S, TimeUnit.SECONDS);
    }

    private static void print(String key, Object value) {
        System.out.println(key + "=" + value);
    }

    /** DescribeCluster (60). */
    private static void cluster(Admin admin) throws Exception {
        DescribeClusterResult described = admin.describeCluster();
        List<Integer> ids = new ArrayList<>();
        for (Node node : get(described.nodes())) {
            ids.add(node.id());
        }
        ids.sort(null);
        print("cluster.nodes", ids);
        print("cluster.controller", get(described.controller()).id());
        print("cluster.id", get(described.clusterId()));
    }

    /** CreateTopics, then CreatePartitions (37) from 1 to 3, then Metadata. */
    private static void topics(Admin admin, String topic, short replicationFactor)
            throws Exception {
        get(admin.createTopics(List.of(new NewTopic(topic, 1, replicationFactor))).all());
        get(admin.createPartitions(Map.of(topic, NewPartitions.increaseTo(3))).all());
        TopicDescription description =
                get(admin.describeTopics(List.of(topic)).topicNameValues().get(topic));
        print("topics.partitions", description.partitions().size());
        for (TopicPartitionInfo info : description.partitions()) {
            print("topics.partition." + info.partition() + ".replicas", info.replicas().size());
            print("topics.partition." + info.partition() + ".has_leader", info.leader() != null);
        }
    }

    /** IncrementalAlterConfigs (44) of a topic, then DescribeConfigs. */
    private static void topicConfigs(Admin admin, String topic) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.TOPIC, topic);
        alter(admin, resource, "retention.ms", "3600000");
        print("configs.topic.retention.ms", describe(admin, resource, "retention.ms"));
    }

    /**
     * IncrementalAlterConfigs of one broker's dynamic layer (sent by the AdminClient to that
     * broker), DescribeConfigs, then the key deleted again.
     */
    private static void brokerConfigs(Admin admin, String brokerId) throws Exception {
        ConfigResource resource = new ConfigResource(ConfigResource.Type.BROKER, brokerId);
        alter(admin, resource, "log.retention.ms", "5400000");
        print("configs.broker.log.retention.ms", describe(admin, resource, "log.retention.ms"));
        AlterConfigOp delete = new AlterConfigOp(
                new ConfigEntry("log.retention.ms", null), AlterConfigOp.OpType.DELETE);
        get(admin.incrementalAlterConfigs(Map.of(resource, List.of(delete))).all());
        print("configs.broker.log.retention.ms.deleted",
                describe(admin, resource, "log.retention.ms"));
    }

    private static void alter(Admin admin, ConfigResource resource, String key, String value)
            throws Exception {
        AlterConfigOp set =
                new AlterConfigOp(new ConfigEntry(key, value), AlterConfigOp.OpType.SET);
        get(admin.incrementalAlterConfigs(Map.of(resource, List.of(set))).all());
    }

    /** The key's value and source, as "VALUE SOURCE". */
    private static String describe(Admin admin, ConfigResource resource, String key)
            throws Exception {
        ConfigEntry entry =
                get(admin.describeConfigs(List.of(resource)).values().get(resource)).get(key);
        return entry.value() + " " + entry.source();
    }

    /** Ten records produced with acks=all, then DeleteRecords (21) and ListOffsets. */
    private static void records(Admin admin, String bootstrap, String topic) throws Exception {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("acks", "all");
        try (KafkaProducer<byte[], byte[]> producer = new KafkaProducer<>(
                props, new ByteArraySerializer(), new ByteArraySerializer())) {
            for (int i = 0; i < 10; i++) {
                producer.send(new ProducerRecord<>(topic, 0, null, ("v" + i).getBytes())).get();
            }
        }
        TopicPartition partition = new TopicPartition(topic, 0);
        long low = get(admin.deleteRecords(Map.of(partition, RecordsToDelete.beforeOffset(6)))
                        .lowWatermarks().get(partition))
                .lowWatermark();
        print("records.low_watermark", low);
        long earliest = get(admin.listOffsets(Map.of(partition, OffsetSpec.earliest()))
                        .partitionResult(partition))
                .offset();
        print("records.earliest", earliest);
    }

    /**
     * A consumer group's offsets committed, listed, altered, deleted per partition (OffsetDelete,
     * 47), then the group deleted (DeleteGroups, 42).
     */
    private static void groups(Admin admin, String bootstrap, String topic) throws Exception {
        String group = "java-admin-" + topic;
        TopicPartition partition = new TopicPartition(topic, 0);
        commit(bootstrap, group, partition, 7);
        print("groups.listed", listed(admin).contains(group));
        print("groups.committed", committed(admin, group));
        get(admin.alterConsumerGroupOffsets(group, Map.of(partition, new OffsetAndMetadata(3)))
                .all());
        print("groups.altered", committed(admin, group));
        get(admin.deleteConsumerGroupOffsets(group, Set.of(partition)).all());
        print("groups.after_offset_delete", committed(admin, group));
        get(admin.deleteConsumerGroups(List.of(group)).all());
        print("groups.listed_after_delete", listed(admin).contains(group));
    }

    private static void commit(
            String bootstrap, String group, TopicPartition partition, long offset) {
        Properties props = new Properties();
        props.put("bootstrap.servers", bootstrap);
        props.put("group.id", group);
        props.put("enable.auto.commit", "false");
        try (KafkaConsumer<byte[], byte[]> consumer = new KafkaConsumer<>(
                props, new ByteArrayDeserializer(), new ByteArrayDeserializer())) {
            consumer.assign(List.of(partition));
            consumer.commitSync(Map.of(partition, new OffsetAndMetadata(offset)));
        }
    }

    private static Set<String> listed(Admin admin) throws Exception {
        Set<String> ids = new TreeSet<>();
        for (GroupListing listing :
                get(admin.listGroups(ListGroupsOptions.forConsumerGroups()).all())) {
            ids.add(listing.groupId());
        }
        return ids;
    }

    /** The group's committed offsets as "partition:offset" in partition order. */
    private static List<String> committed(Admin admin, String group) throws Exception {
        List<String> found = new ArrayList<>();
        get(admin.listConsumerGroupOffsets(group).partitionsToOffsetAndMetadata())
                .forEach((tp, offset) -> found.add(tp.partition() + ":" + offset.offset()));
        found.sort(null);
        return found;
    }

    /** DescribeAcls (29) without an authorizer: Kafka's SecurityDisabledException. */
    private static void acls(Admin admin) throws Exception {
        try {
            get(admin.describeAcls(AclBindingFilter.ANY).values());
            print("acls.error", "none");
        } catch (ExecutionException e) {
            print("acls.error", e.getCause().getClass().getSimpleName());
        }
    }
}
