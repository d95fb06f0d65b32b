# coordctl(1) completion for bash: commands, then each command's flags, both
# read from coordctl's own --help (so they never drift from the binary);
# after `--` (the CMD of lock, once, leader-run) bash's command completion.
# Installed as share/bash-completion/completions/coordctl.

_coordctl_commands() {
    "$1" --help 2>/dev/null | sed -n '/^Commands:/,$ s/^  \([a-z][a-z-]*\).*/\1/p'
}

_coordctl_flags() {
    "$1" "$2" --help 2>/dev/null | grep -oE -- '(^|[][ (|,])--?[a-zA-Z][a-zA-Z-]*' | sed 's/^[][ (|,]//' | sort -u
}

_coordctl() {
    local cur=${COMP_WORDS[COMP_CWORD]} prog=${COMP_WORDS[0]} cmd="" i
    for ((i = 1; i < COMP_CWORD; i++)); do
        case ${COMP_WORDS[i]} in
            --)  # CMD and its arguments
                 if [ -n "$cmd" ]; then
                     if ((i + 1 == COMP_CWORD)); then
                         COMPREPLY=($(compgen -c -- "$cur" | sort -u))
                     else
                         COMPREPLY=($(compgen -f -- "$cur"))
                     fi
                     return
                 fi ;;
            --socket|--scope) ((i++)) ;;
            -*) ;;
            *) [ -z "$cmd" ] && cmd=${COMP_WORDS[i]} ;;
        esac
    done
    case ${COMP_WORDS[COMP_CWORD - 1]} in
        --socket) COMPREPLY=($(compgen -f -- "$cur")); return ;;
        --body-file|-f) COMPREPLY=($(compgen -f -- "$cur")); return ;;
    esac
    if [ -z "$cmd" ]; then
        if [[ $cur == -* ]]; then
            COMPREPLY=($(compgen -W "--socket --scope --json --no-autostart --help --version" -- "$cur"))
        else
            COMPREPLY=($(compgen -W "$(_coordctl_commands "$prog")" -- "$cur"))
        fi
    elif [[ $cur == -* ]]; then
        COMPREPLY=($(compgen -W "$(_coordctl_flags "$prog" "$cmd") --help --json" -- "$cur"))
    fi
}
complete -F _coordctl coordctl
