/* unit.client_reconnect — the reconnect window's clock (client/reconnect.c).
 *
 * The I/O thread reads the clock, then takes the client's mutex; a
 * suspension made under it stamps a later time. A tick with the earlier
 * time must not count that as the window gone by: before the fix the
 * unsigned difference wrapped and every future failed at once with "no
 * answer within the reconnect window of 30000 ms" (chaos run `sched`). */
#include <stdlib.h>
#include <string.h>

#include "internal.h"
#include "kit.h"

static tsr_client *suspended_client(uint64_t suspended_ms, int64_t reconnect_ms)
{
  tsr_client *c = calloc(1, sizeof *c);
  c->state = CONN_LOST;
  c->suspended = true;
  c->suspended_ms = suspended_ms;
  c->reconnect_ms = reconnect_ms;
  strcpy(c->lost_msg, "no word from it for 2000 ms");
  return c;
}

TEST(a_tick_older_than_the_suspension_keeps_waiting)
{
  tsr_client *c = suspended_client(1000, 30000);
  ASSERT_TRUE(c != NULL);
  client_reconnect_tick_locked(c, 999);     /* read before the suspension's stamp */
  ASSERT_TRUE(c->suspended);
  ASSERT_EQ(c->state, CONN_LOST);
  client_reconnect_tick_locked(c, 1000 + 30000);   /* the window's last millisecond */
  ASSERT_TRUE(c->suspended);
  free(c);
}

TEST(only_a_suspended_lost_session_is_timed)
{
  tsr_client *c = suspended_client(1000, 30000);
  ASSERT_TRUE(c != NULL);
  c->suspended = false;                      /* futures already failed, or resumed */
  client_reconnect_tick_locked(c, 1000 + 60000);
  ASSERT_EQ(c->state, CONN_LOST);
  c->suspended = true;
  c->state = CONN_UP;                        /* welcomed again meanwhile */
  client_reconnect_tick_locked(c, 1000 + 60000);
  ASSERT_EQ(c->state, CONN_UP);
  ASSERT_TRUE(c->suspended);
  free(c);
}

int main(void)
{
  RUN(a_tick_older_than_the_suspension_keeps_waiting);
  RUN(only_a_suspended_lost_session_is_timed);
  return kit_summary();
}
