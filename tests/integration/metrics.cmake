# SPDX-License-Identifier: Apache-2.0
# metrics.cmake: Prometheus metrics (docs/metrics.md).
