export { clockJump, type ClockJumpResult, type Narrator } from "./clock-jump.js";
