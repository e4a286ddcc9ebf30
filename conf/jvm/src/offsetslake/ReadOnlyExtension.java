package offsetslake;

import java.util.Set;
import org.apache.spark.sql.SparkSession;
import org.apache.spark.sql.SparkSessionExtensions;
import org.apache.spark.sql.catalyst.analysis.LocalTempView$;
import org.apache.spark.sql.catalyst.plans.logical.Command;
import org.apache.spark.sql.catalyst.plans.logical.LogicalPlan;
import org.apache.spark.sql.execution.command.CreateSQLFunctionCommand;
import org.apache.spark.sql.execution.command.CreateViewCommand;
import org.apache.spark.sql.execution.command.DropFunctionCommand;
import org.apache.spark.sql.execution.command.DropTempViewCommand;
import org.apache.spark.sql.execution.datasources.CreateTempViewUsing;
import scala.Function1;
import scala.runtime.AbstractFunction1;
import scala.runtime.BoxedUnit;

/**
 * spark.sql.extensions=offsetslake.ReadOnlyExtension (next to Delta's extension): once
 * ReadOnlyGuard.lock() was called, every analyzed plan that would write data or change the
 * persistent catalog fails analysis, in every session of the JVM (Spark Connect's and the
 * Thrift server's sessions are built from the same extensions).
 *
 * Check rules run on the fully analyzed plan, after Delta's own resolution and post-hoc rules
 * and before a command executes (commands run eagerly, right after analysis): they see the
 * final command nodes (AppendData, DeleteCommand, MergeIntoCommand, SaveIntoDataSourceCommand,
 * CreateTable, OptimizeTableCommand, ...), so refusing there stops the write. Statements of a
 * SQL script and EXECUTE IMMEDIATE are analyzed, and checked, one by one.
 */
public final class ReadOnlyExtension extends AbstractFunction1<SparkSessionExtensions, BoxedUnit> {

    @Override
    public BoxedUnit apply(SparkSessionExtensions extensions) {
        extensions.injectCheckRule(new AbstractFunction1<SparkSession, Function1<LogicalPlan, BoxedUnit>>() {
            @Override
            public Function1<LogicalPlan, BoxedUnit> apply(SparkSession session) {
                return CHECK;
            }
        });
        return BoxedUnit.UNIT;
    }

    private static final Function1<LogicalPlan, BoxedUnit> CHECK = new AbstractFunction1<LogicalPlan, BoxedUnit>() {
        @Override
        public BoxedUnit apply(LogicalPlan plan) {
            if (ReadOnlyGuard.isLocked()) {
                // with subqueries: a TRANSFORM can hide in an IN (SELECT ...)
                plan.foreachWithSubqueries(NODE);
            }
            return BoxedUnit.UNIT;
        }
    };

    private static final Function1<LogicalPlan, BoxedUnit> NODE = new AbstractFunction1<LogicalPlan, BoxedUnit>() {
        @Override
        public BoxedUnit apply(LogicalPlan node) {
            if (node instanceof Command ? !allowedCommand(node) : DENIED_QUERY_NODES.contains(node.getClass().getSimpleName())) {
                throw ReadOnlyGuard.refuse(node.nodeName());
            }
            return BoxedUnit.UNIT;
        }
    };

    /**
     * Allowlist: a Command (Spark's, Delta's, any future one) is refused unless its class is
     * one of these (exactly: subclasses are not trusted) or it makes a session-local object
     * (allowedCommand).
     * Introspection, session settings and temporary objects only. Refused on purpose although
     * they write nothing to the lake: CACHE/UNCACHE TABLE and CLEAR CACHE (one cache serves all
     * the endpoint's sessions: one client would pin a snapshot or memory, or drop another's),
     * ADD JAR/FILE/ARCHIVE (they change the shared JVM), ANALYZE TABLE (writes statistics to
     * the catalog), class-based CREATE TEMPORARY FUNCTION (loads a class, maybe from a jar).
     */
    private static final Set<String> ALLOWED_COMMANDS = Set.of(
            // v2 logical commands Spark keeps for DataSource v2 tables (Delta's, via DeltaCatalog)
            "org.apache.spark.sql.catalyst.plans.logical.DescribeRelation",
            "org.apache.spark.sql.catalyst.plans.logical.DescribeColumn",
            "org.apache.spark.sql.catalyst.plans.logical.DescribeNamespace",
            "org.apache.spark.sql.catalyst.plans.logical.DescribeFunction",
            "org.apache.spark.sql.catalyst.plans.logical.ShowTables",
            "org.apache.spark.sql.catalyst.plans.logical.ShowTablesExtended",
            "org.apache.spark.sql.catalyst.plans.logical.ShowTablePartition",
            "org.apache.spark.sql.catalyst.plans.logical.ShowViews",
            "org.apache.spark.sql.catalyst.plans.logical.ShowFunctions",
            "org.apache.spark.sql.catalyst.plans.logical.ShowColumns",
            "org.apache.spark.sql.catalyst.plans.logical.ShowCreateTable",
            "org.apache.spark.sql.catalyst.plans.logical.ShowPartitions",
            "org.apache.spark.sql.catalyst.plans.logical.ShowTableProperties",
            "org.apache.spark.sql.catalyst.plans.logical.SetCatalogAndNamespace",
            // session variables (DECLARE / SET VAR / DROP TEMPORARY VARIABLE)
            "org.apache.spark.sql.catalyst.plans.logical.CreateVariable",
            "org.apache.spark.sql.catalyst.plans.logical.SetVariable",
            "org.apache.spark.sql.catalyst.plans.logical.DropVariable",
            // v1 commands
            "org.apache.spark.sql.execution.command.ExplainCommand",
            "org.apache.spark.sql.execution.command.DescribeQueryCommand",
            "org.apache.spark.sql.execution.command.DescribeTableCommand",
            "org.apache.spark.sql.execution.command.DescribeRelationJsonCommand",
            "org.apache.spark.sql.execution.command.DescribeColumnCommand",
            "org.apache.spark.sql.execution.command.DescribeDatabaseCommand",
            "org.apache.spark.sql.execution.command.DescribeFunctionCommand",
            "org.apache.spark.sql.execution.command.DescribeProcedureCommand",
            "org.apache.spark.sql.execution.command.ShowCatalogsCommand",
            "org.apache.spark.sql.execution.command.ShowCollationsCommand",
            "org.apache.spark.sql.execution.command.ShowColumnsCommand",
            "org.apache.spark.sql.execution.command.ShowCreateTableCommand",
            "org.apache.spark.sql.execution.command.ShowCreateTableAsSerdeCommand",
            "org.apache.spark.sql.execution.command.ShowCurrentNamespaceCommand",
            "org.apache.spark.sql.execution.command.ShowFunctionsCommand",
            "org.apache.spark.sql.execution.command.ShowNamespacesCommand",
            "org.apache.spark.sql.execution.command.ShowPartitionsCommand",
            "org.apache.spark.sql.execution.command.ShowProceduresCommand",
            "org.apache.spark.sql.execution.command.ShowTablePropertiesCommand",
            "org.apache.spark.sql.execution.command.ShowTablesCommand",
            "org.apache.spark.sql.execution.command.ShowViewsCommand",
            "org.apache.spark.sql.execution.command.ListJarsCommand",
            "org.apache.spark.sql.execution.command.ListFilesCommand",
            "org.apache.spark.sql.execution.command.ListArchivesCommand",
            "org.apache.spark.sql.execution.command.SetCommand",
            "org.apache.spark.sql.execution.command.ResetCommand",
            "org.apache.spark.sql.execution.command.SetCatalogCommand",
            "org.apache.spark.sql.execution.command.SetNamespaceCommand",
            "org.apache.spark.sql.execution.command.SetPathCommand",
            // only drops cached metadata/relations; lets a client see files added outside Delta
            "org.apache.spark.sql.catalyst.plans.logical.RefreshTable",
            "org.apache.spark.sql.execution.command.RefreshTableCommand",
            // Delta's DESCRIBE DETAIL / HISTORY and its SHOW PARTITIONS / COLUMNS
            "org.apache.spark.sql.delta.commands.DescribeDeltaDetailCommand",
            "org.apache.spark.sql.delta.commands.DescribeDeltaHistoryCommand",
            "org.apache.spark.sql.delta.commands.ShowDeltaPartitionsCommand",
            "org.apache.spark.sql.delta.commands.ShowDeltaTableColumnsCommand");

    /** Commands allowed only when they touch session-local objects (global temp views are
     *  shared by all sessions: refused). */
    private static boolean allowedCommand(LogicalPlan node) {
        if (ALLOWED_COMMANDS.contains(node.getClass().getName())) {
            return true;
        }
        if (node instanceof CreateViewCommand) {
            return ((CreateViewCommand) node).viewType() == LocalTempView$.MODULE$;
        }
        if (node instanceof CreateTempViewUsing) {
            return !((CreateTempViewUsing) node).global();
        }
        if (node instanceof CreateSQLFunctionCommand) { // SQL UDFs only: no class loading
            return ((CreateSQLFunctionCommand) node).isTemp();
        }
        if (node instanceof DropFunctionCommand) {
            return ((DropFunctionCommand) node).isTemp();
        }
        if (node instanceof DropTempViewCommand) {
            return ((DropTempViewCommand) node).ident().namespace().length == 0;
        }
        return false;
    }

    /**
     * Plan nodes that write or run outside code but are not Commands, so the allowlist above
     * does not catch them: streaming sinks (a Connect client can start a stream), INSERT forms
     * left unresolved, CALL of a procedure, and TRANSFORM ... USING 'shell command'.
     * Simple names, so a node moving package stays refused.
     */
    private static final Set<String> DENIED_QUERY_NODES = Set.of(
            "InsertIntoStatement", "InsertIntoDir", "WriteFiles",
            "WriteToStream", "WriteToStreamStatement", "WriteToDataSourceV2",
            "WriteToMicroBatchDataSource", "WriteToMicroBatchDataSourceV1", "WriteToContinuousDataSource",
            "Call", "ScriptTransformation",
            "DeltaDelete", "DeltaUpdateTable", "CloneTableStatement", "RestoreTableStatement");
}
