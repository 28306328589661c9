# SPDX-License-Identifier: Apache-2.0
# carbon.cmake: carbon- and price-aware parts (Chase; docs/carbon.md).
