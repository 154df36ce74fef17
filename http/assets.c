/* Routes for the embedded dashboard files (assets.h). */
#include "assets.h"

extern const unsigned char index_html[], dashboard_js[], dashboard_css[], chart_js[];
extern const size_t index_html_len, dashboard_js_len, dashboard_css_len, chart_js_len;

typedef struct asset {
  const char *path;
  const char *type;
  const unsigned char *data;
  const size_t *len;
} asset;

static const asset ASSETS[] = {
  {"/", "text/html; charset=utf-8", index_html, &index_html_len},
  {"/index.html", "text/html; charset=utf-8", index_html, &index_html_len},
  {"/dashboard.js", "text/javascript; charset=utf-8", dashboard_js, &dashboard_js_len},
  {"/dashboard.css", "text/css; charset=utf-8", dashboard_css, &dashboard_css_len},
  {"/static/chart.js", "text/javascript; charset=utf-8", chart_js, &chart_js_len},
};

static int serve_asset(void *arg, const tsr_http_request *req, tsr_http_reply *reply)
{
  (void)req;
  const asset *a = arg;
  reply->content_type = a->type;
  reply->body = (char *)a->data;
  reply->len = *a->len;
  reply->body_static = 1;
  return 0;
}

size_t tsr_http_asset_routes(tsr_http_route *out, size_t cap)
{
  size_t n = 0;
  for (size_t i = 0; i < sizeof ASSETS / sizeof ASSETS[0] && n < cap; i++)
    out[n++] = (tsr_http_route){ASSETS[i].path, serve_asset, (void *)&ASSETS[i]};
  return n;
}
