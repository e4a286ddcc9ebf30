"""What operators read: SQL audits (audit), Great Expectations suites (quality), the HTML
report (report gathers with Spark into model, html and plots render it)."""
