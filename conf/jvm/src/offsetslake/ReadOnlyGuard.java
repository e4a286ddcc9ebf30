package offsetslake;

import java.util.LinkedHashMap;
import java.util.Map;
import org.apache.spark.QueryContext;
import org.apache.spark.sql.AnalysisException;
import scala.Option;
import scala.collection.immutable.Map$;
import scala.jdk.javaapi.CollectionConverters;

/**
 * The switch that turns the SQL endpoint read-only. One-way on purpose: the endpoint's owner
 * calls lock() once the lake is set up (from Python: spark._jvm.offsetslake.ReadOnlyGuard.lock()),
 * and no SQL, conf or session can undo it short of restarting the JVM.
 */
public final class ReadOnlyGuard {
    public static final String PREFIX = "offsets_lake endpoint is read-only: ";

    // volatile: lock() runs on a py4j thread, the checks on Connect/Thrift handler threads.
    private static volatile boolean locked = false;

    // The server's own thread: jobs.serve keeps its rule views computed, replacing global
    // temporary views after lock(). Clients' statements run on Connect and Thrift handler
    // threads, never on this one (pyspark pins each Python thread to one JVM thread).
    private static final ThreadLocal<Boolean> SERVER_THREAD = ThreadLocal.withInitial(() -> false);

    private ReadOnlyGuard() {}

    public static void lock() {
        locked = true;
    }

    /** Exempts the calling thread (the endpoint's own, through py4j) from the lock. */
    public static void exemptThisThread() {
        SERVER_THREAD.set(true);
    }

    public static boolean isLocked() {
        return locked && !SERVER_THREAD.get();
    }

    /**
     * An AnalysisException whose message is exactly PREFIX + what was refused. Built with the
     * message constructor: the (errorClass, parameters) one would render "[CLASS] ..." first.
     * An error class goes along all the same, with the parameters its template takes: SQL
     * scripts (BEGIN ... END) match handlers on condition and SQLSTATE and die of a
     * NullPointerException on an exception without them, and clients get a SQLSTATE (42809).
     * (A SQLSTATE of our own would be lost: checkAnalysis rewraps whatever a check rule throws
     * into an ExtendedAnalysisException that keeps message, error class and parameters only.)
     */
    static AnalysisException refusal(String what) {
        Map<String, String> parameters = new LinkedHashMap<>();
        parameters.put("statement", what);
        parameters.put("objectType", "read-only endpoint");
        parameters.put("objectName", "offsets_lake");
        return new AnalysisException(
                PREFIX + what,
                Option.empty(), Option.empty(), Option.empty(), // line, position, cause
                Option.apply("FORBIDDEN_OPERATION"),
                Map$.MODULE$.from(CollectionConverters.asScala(parameters)),
                new QueryContext[0]);
    }

    /** Throws refusal(what). AnalysisException is a checked exception to javac but not to the
     *  Scala code that calls the check rule, which declares nothing: rethrow it unchecked. */
    static RuntimeException refuse(String what) {
        throw ReadOnlyGuard.<RuntimeException>unchecked(refusal(what));
    }

    @SuppressWarnings("unchecked")
    private static <T extends Throwable> T unchecked(Throwable t) throws T {
        throw (T) t;
    }
}
