"""DataFrame -> DataFrame functions with plain arguments. These import pyspark."""
