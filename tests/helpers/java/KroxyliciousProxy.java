// Kroxylicious as a plain pass-through proxy, for the relay bench: its runtime's KafkaProxy started on
// the configuration file named by the one argument (kroxylicious-app, which holds its command line, is
// not on Maven Central as served here; kroxylicious-runtime is, up to 0.12.0). Prints "kroxylicious
// proxy listening" once it listens, and serves until killed. Run as a single source file
// (tests/helpers/kroxylicious.py).

import io.kroxylicious.proxy.KafkaProxy;
import io.kroxylicious.proxy.config.ConfigParser;
import io.kroxylicious.proxy.internal.config.Features;
import java.nio.file.Files;
import java.nio.file.Path;

public final class KroxyliciousProxy {
    public static void main(String[] args) throws Exception {
        ConfigParser parser = new ConfigParser();
        var config = parser.parseConfiguration(Files.readString(Path.of(args[0])));
        try (KafkaProxy proxy = new KafkaProxy(parser, config, Features.defaultFeatures())) {
            proxy.startup();
            System.out.println("kroxylicious proxy listening");
            proxy.block();
        }
    }
}
