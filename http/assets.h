/* http/assets.h — the dashboard's files, embedded at build time
 * (embed.cmake): the page, its script and style, and Chart.js from
 * Debian's libjs-chart.js. Static for the process's life. */
#ifndef TSR_HTTP_ASSETS_H
#define TSR_HTTP_ASSETS_H

#include "http.h"

/* Routes serving "/" (index.html), "/dashboard.js", "/dashboard.css" and
 * "/static/chart.js"; writes at most cap routes to out and returns how
 * many. */
size_t tsr_http_asset_routes(tsr_http_route *out, size_t cap);

#endif
