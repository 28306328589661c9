#SPDX - License - Identifier : Apache - 2.0
#metrics.cmake : Prometheus metrics(docs / metrics.md) : rendering on simulated and mock GPUs on a virtual
#clock, carbon accounting, window histograms, and the / metrics endpoint over loopback.
joule_test(
    measure_metrics_test SOURCES metrics_test.cpp LIBS joule::measure PkgConfig::HTTPLIB LABELS measure)
