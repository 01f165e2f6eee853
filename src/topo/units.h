/* The units the topology's figures and text format are written in (private to src/topo). */
#ifndef RELAY_TOPO_UNITS_H_
#define RELAY_TOPO_UNITS_H_
#define GBS 1e9 /* the text format's bandwidth unit: GB/s */
#define US 1e-6 /* and its time unit */
#endif
