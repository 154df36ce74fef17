/* graphs/tiles_int.h — what tiles.c shares with tiles_run.c. */
#ifndef TSR_GRAPHS_TILES_INT_H
#define TSR_GRAPHS_TILES_INT_H

#include "graphs.h"
#include "tessera/tiles.h"

/* img cut to the tile grid (o->drop_partial) and chunked tile x tile x 3,
 * or with regions kept in chunks of whole tiles (tile_stats takes a region
 * a task), as a new array the caller frees; `what` starts the messages. */
int gtile_grid(tsr_array_ctx *ctx, const tsr_array *img, const tsr_tile_opts *o, const char *what, bool regions,
               tsr_array **grid_p);

#endif
