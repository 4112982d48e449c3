/** A mistake of the person running the command (a bad file, option or spec): shown as one line, without a stack. */
export class UserError extends Error {}
