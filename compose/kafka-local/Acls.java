// Creates the ACLs of a file on a broker, connecting with an admin client.properties.
// One ACL a line: PRINCIPAL OPERATION RESOURCE_TYPE NAME PATTERN_TYPE, e.g.
//   User:publisher WRITE TOPIC turnlog.answers LITERAL
// Usage: java -cp '<kafka lib>/*' Acls.java admin.properties host:port acls.txt
import java.io.FileInputStream;
import java.nio.file.Files;
import java.nio.file.Path;
import java.util.ArrayList;
import java.util.List;
import java.util.Properties;
import org.apache.kafka.clients.admin.Admin;
import org.apache.kafka.common.acl.AccessControlEntry;
import org.apache.kafka.common.acl.AclBinding;
import org.apache.kafka.common.acl.AclOperation;
import org.apache.kafka.common.acl.AclPermissionType;
import org.apache.kafka.common.resource.PatternType;
import org.apache.kafka.common.resource.ResourcePattern;
import org.apache.kafka.common.resource.ResourceType;

public class Acls {
    public static void main(String[] args) throws Exception {
        Properties props = new Properties();
        try (FileInputStream in = new FileInputStream(args[0])) {
            props.load(in);
        }
        props.put("bootstrap.servers", args[1]);
        List<AclBinding> bindings = new ArrayList<>();
        for (String line : Files.readAllLines(Path.of(args[2]))) {
            line = line.strip();
            if (line.isEmpty() || line.startsWith("#")) continue;
            String[] f = line.split("\\s+");
            ResourcePattern resource = new ResourcePattern(
                ResourceType.fromString(f[2]), f[3], PatternType.fromString(f[4]));
            AccessControlEntry entry = new AccessControlEntry(
                f[0], "*", AclOperation.fromString(f[1]), AclPermissionType.ALLOW);
            if (resource.resourceType() == ResourceType.UNKNOWN
                    || entry.operation() == AclOperation.UNKNOWN) {
                throw new IllegalArgumentException("cannot read ACL line: " + line);
            }
            bindings.add(new AclBinding(resource, entry));
        }
        try (Admin admin = Admin.create(props)) {
            admin.createAcls(bindings).all().get();
        }
        System.out.println("created " + bindings.size() + " ACLs");
    }
}
