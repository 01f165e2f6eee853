/* relaycc-plan --scatter-parts (tools/common/p2p_tool.c): tool code, not the
 * library's; tools and tests get it from the relaycc_toolkit target. */
#ifndef RELAY_TOOLS_P2P_TOOL_H_
#define RELAY_TOOLS_P2P_TOOL_H_

#ifdef __cplusplus
extern "C" {
#endif

/* relaycc-plan --scatter-parts ...: the p2p layer's own options are parsed
 * here, so tools/plan.c only dispatches. Returns the process exit code. */
int p2pPlanToolMain(int argc, char** argv);

#ifdef __cplusplus
}
#endif
#endif
