/* Support header for cpp/include_flag.sac and cpp/include_guard.sac: a guarded
   set of constants and one function that uses them. */
#ifndef CONSTS_H
#define CONSTS_H

#define SIZE 4
#define SCALE 3

int scaled(int x)
{
  return x * SCALE;
}

#endif
