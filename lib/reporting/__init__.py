"""What operators read, with Spark SQL: the canned SQL audits (audit_queries), the Great
Expectations suites (quality_suites), the HTML report (report_builder gathers into model;
html and plots render it). May import every layer but lib.testdata."""
