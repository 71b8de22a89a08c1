# Drawn by `kvtier report`; redraw from this folder with: gnuplot save_drops.gp
set terminal svg size 900,520 dynamic background rgb 'white' font 'sans,12'
set output 'save_drops.svg'
set termoption noenhanced
set title 'Saves dropped against the target rate'
set xlabel 'target rate (GB/s)'
set ylabel 'saves dropped'
set grid
set key below
set yrange [0:*]
$d0 << EOD
1.17938 0
1.47422 0
1.62164 0
1.76907 36
2.35876 151
4.71751 705
EOD
$d1 << EOD
1.17938 0
1.76907 0
2.06391 0
2.21133 28
2.35876 135
4.71751 705
EOD
plot $d0 using 1:2 with linespoints lw 2 pt 7 lc 1 dt 1 title 'dropped: file:///work/benchdir-save, llama-3.1-8b (save-file-2048.json)', \
     $d1 using 1:2 with linespoints lw 2 pt 7 lc 2 dt 1 title 'dropped: fs:///work/benchdir-save, llama-3.1-8b (save-fs-2049.json)'
