// A pause's request_hash from Java: SHA-256 of the request's canonical JSON text (keys sorted
// by code point, no whitespace, text as itself but for the few escapes JSON needs), in
// lowercase hex. Jackson (in Kafka's own jars) parses; the canonical text is written here, so
// no JSON writer's own choices (key order, escapes) can make it differ.
//
//   java -cp "kafka/libs/*" RequestHash.java '{"questions":[{"question":"Which region?","options":["eu","us"]}]}'

import com.fasterxml.jackson.databind.ObjectMapper;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.security.MessageDigest;
import java.util.ArrayList;
import java.util.List;
import java.util.Map;

public class RequestHash {
    public static void main(String[] args) throws Exception {
        for (String request : args) {
            String canonical = canonical(new ObjectMapper().readValue(request, Object.class));
            byte[] digest = MessageDigest.getInstance("SHA-256")
                .digest(canonical.getBytes(StandardCharsets.UTF_8));
            System.out.println(String.format("%064x", new BigInteger(1, digest)) + " " + canonical);
        }
    }

    static String canonical(Object value) {
        StringBuilder out = new StringBuilder();
        write(value, out);
        return out.toString();
    }

    static void write(Object value, StringBuilder out) {
        if (value == null) {
            out.append("null");
        } else if (value instanceof Boolean) {
            out.append(value.toString());
        } else if (value instanceof Integer || value instanceof Long || value instanceof BigInteger) {
            out.append(value.toString());
        } else if (value instanceof Number) {
            // A fraction or an exponent is written as Python prints a float: keep requests to
            // integers and text rather than reproduce that here.
            throw new IllegalArgumentException("a number with a fraction: " + value);
        } else if (value instanceof String) {
            text((String) value, out);
        } else if (value instanceof List) {
            out.append('[');
            String comma = "";
            for (Object item : (List<?>) value) {
                out.append(comma);
                write(item, out);
                comma = ",";
            }
            out.append(']');
        } else if (value instanceof Map) {
            List<String> keys = new ArrayList<>();
            for (Object key : ((Map<?, ?>) value).keySet()) {
                keys.add((String) key);
            }
            keys.sort(RequestHash::byCodePoint); // Java's own order is by UTF-16 unit
            out.append('{');
            String comma = "";
            for (String key : keys) {
                out.append(comma);
                text(key, out);
                out.append(':');
                write(((Map<?, ?>) value).get(key), out);
                comma = ",";
            }
            out.append('}');
        } else {
            throw new IllegalArgumentException("not JSON: " + value.getClass());
        }
    }

    static int byCodePoint(String a, String b) {
        int i = 0, j = 0;
        while (i < a.length() && j < b.length()) {
            int x = a.codePointAt(i), y = b.codePointAt(j);
            if (x != y) {
                return Integer.compare(x, y);
            }
            i += Character.charCount(x);
            j += Character.charCount(y);
        }
        return Integer.compare(a.length() - i, b.length() - j);
    }

    static void text(String s, StringBuilder out) {
        out.append('"');
        for (int i = 0; i < s.length(); i++) {
            char c = s.charAt(i);
            switch (c) {
                case '"': out.append("\\\""); break;
                case '\\': out.append("\\\\"); break;
                case '\n': out.append("\\n"); break;
                case '\r': out.append("\\r"); break;
                case '\t': out.append("\\t"); break;
                case '\b': out.append("\\b"); break;
                case '\f': out.append("\\f"); break;
                default:
                    if (c < 0x20) {
                        out.append(String.format("\\u%04x", (int) c)); // lowercase hex
                    } else {
                        out.append(c);
                    }
            }
        }
        out.append('"');
    }
}
