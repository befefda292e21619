// The words of a run's verdict (engine/train/verdict.py's kinds), shared by the student's page
// (web/page/results.js) and the teacher's roster (web/teacher/teacher.js): the same words on both.

/** The verdict's heading and the status line's words. */
export const VERDICT_TITLE = {
  ok: "Finished", diverged: "Diverged", chance: "No better than chance", stopped: "Stopped early",
};
