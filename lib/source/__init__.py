"""Where a __consumer_offsets log comes from: a broker's log dir or an archive of it (logdir),
or the live topic over the Kafka protocol (live). May import lib.codec; never pyspark."""
